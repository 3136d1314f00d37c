#include <gtest/gtest.h>
#include "schedule/schedule.hpp"
