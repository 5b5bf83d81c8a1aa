/* num/bits.h: FP32 <-> raw bit pattern, shared by the scalar conversions. */
#ifndef MIXPREC_NUM_BITS_H
#define MIXPREC_NUM_BITS_H

#include <stdint.h>
#include <string.h>

static inline uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float f32_from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

#endif
