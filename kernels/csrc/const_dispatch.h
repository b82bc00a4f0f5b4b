// f(std::integral_constant<int, N>{}) for a runtime n in 1..8 (8 for anything larger): the
// kernels' row counts and head sizes are template parameters, so their accumulators are sized
// at compile time and stay in registers.
#pragma once

#include <stdint.h>

#include <type_traits>

template <typename F>
inline void const_dispatch_1_to_8(int64_t n, F&& f) {
    switch (n) {
        case 1: f(std::integral_constant<int, 1>{}); break;
        case 2: f(std::integral_constant<int, 2>{}); break;
        case 3: f(std::integral_constant<int, 3>{}); break;
        case 4: f(std::integral_constant<int, 4>{}); break;
        case 5: f(std::integral_constant<int, 5>{}); break;
        case 6: f(std::integral_constant<int, 6>{}); break;
        case 7: f(std::integral_constant<int, 7>{}); break;
        default: f(std::integral_constant<int, 8>{}); break;
    }
}
