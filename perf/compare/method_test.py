#!/usr/bin/python3
"""The measuring method's rules (method.py) that no sweep can show wrong by itself."""
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from method import RUN_BUDGET_S, Pace, Samples, iterations  # noqa: E402


class Iterations(unittest.TestCase):
    def test_without_a_pace_a_run_moves_about_256_MiB_in_10_to_5000_calls(self):
        self.assertEqual(iterations(8, 2), 5000)
        self.assertEqual(iterations(1 << 20, 2), 128)
        self.assertEqual(iterations(64 << 20, 4), 10)

    def test_a_slow_system_gets_only_the_calls_that_fit_the_budget(self):
        self.assertEqual(iterations(8, 4, us_per_call=5000), int(RUN_BUDGET_S * 1e6 / 5000))

    def test_a_fast_system_keeps_the_full_count(self):
        self.assertEqual(iterations(8, 2, us_per_call=0.3), 5000)
        self.assertEqual(iterations(1 << 20, 2, us_per_call=100), 128)

    def test_no_run_has_fewer_than_10_calls(self):
        self.assertEqual(iterations(8, 4, us_per_call=10e6), 10)


class PaceOfEarlierRuns(unittest.TestCase):
    def test_nothing_is_known_before_a_system_has_run_in_that_world(self):
        pace = Pace()
        pace.add("mpich", 2, 8, 1.0)
        self.assertTrue(pace.unknown("mpich", 4))
        self.assertTrue(pace.unknown("gloo", 2))
        self.assertFalse(pace.unknown("mpich", 2))
        self.assertIsNone(pace.get("mpich", 4, 8))

    def test_the_same_size_from_an_earlier_round_comes_first(self):
        pace = Pace()
        pace.add("mpich", 4, 8, 5000.0)
        pace.add("mpich", 4, 32, 4000.0)
        self.assertEqual(pace.get("mpich", 4, 32), 4000.0)

    def test_else_the_largest_smaller_size(self):
        pace = Pace()
        pace.add("gloo", 4, 32, 3000.0)
        pace.add("gloo", 4, 8, 9000.0)
        pace.add("gloo", 4, 1 << 20, 1.0)
        self.assertEqual(pace.get("gloo", 4, 128), 3000.0)

    def test_a_failed_run_leaves_no_pace(self):
        pace = Pace()
        pace.add("oneccl", 4, 8, None)
        self.assertTrue(pace.unknown("oneccl", 4))


class BestOfCleanRounds(unittest.TestCase):
    def test_a_loaded_round_is_left_out_where_a_clean_one_exists(self):
        s = Samples()
        s.add_busy(0, 2, 8, 1.5)
        s.add_busy(1, 2, 8, 0.0)
        s.add(0, 2, 8, "a", 1.0)
        s.add(1, 2, 8, "a", 2.0)
        self.assertEqual(s.best(2, 8, "a"), (2.0, False))


if __name__ == "__main__":
    unittest.main()
