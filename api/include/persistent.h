/* persistent.h: Charm++'s persistent-communication header name; the API is in converse.h. */
#pragma once
#include <converse.h>
