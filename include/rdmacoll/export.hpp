#pragma once
// What librdmacoll exports: it is built with hidden visibility (and a version script), so only
// the classes and functions the public headers mark RDMACOLL_API are visible to its users.

#if defined(__GNUC__)
#define RDMACOLL_API __attribute__((visibility("default")))
#else
#define RDMACOLL_API
#endif
