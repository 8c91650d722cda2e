// How much memory this host can still give a process, and the binary units the refusals print it in.
#pragma once
#include <string>

namespace dptrain {

// MemAvailable from /proc/meminfo (what can be allocated without swapping), or the free physical pages from
// sysconf where that file is missing.
double available_memory_bytes();

// "1.50 GiB": binary units, two decimals (TiB the largest); "12 B" below a KiB.
std::string format_binary_bytes(double bytes);

}  // namespace dptrain
