#pragma once
// Umbrella header: everything a user of rdmacoll needs.

#include "rdmacoll/errors.hpp"
#include "rdmacoll/process_group.hpp"
#include "rdmacoll/tensor.hpp"
#include "rdmacoll/work.hpp"
