"""The backend's test cases, one per command-line name, run by every rank under a launcher
(test_backend.py starts them with rdmacoll-run). A case raises (and the rank exits non-zero)
when any element of any output is wrong; it prints "ok <case>" at the end.
    rdmacoll-run -n 4 /usr/bin/python3 cases.py ops
The cases live in the cases_*.py files by concern; case_support.py holds what they share.
"""
import sys

import cases_collectives
import cases_failures
import cases_memory
import cases_rooted_p2p
import cases_training

MODULES = [cases_collectives, cases_rooted_p2p, cases_failures, cases_training, cases_memory]

if __name__ == "__main__":
    name = sys.argv[1]
    case = next(getattr(m, "case_" + name) for m in MODULES if hasattr(m, "case_" + name))
    case()
    print(f"ok {name}", flush=True)
