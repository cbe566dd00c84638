/* c10_device.h: the part of c10 the doubles need: c10::Device is two
 * int8_t (type, index), trivially copyable, passed in a register. */
#ifndef C10_DEVICE_DOUBLE_H
#define C10_DEVICE_DOUBLE_H
#include <cstdint>

namespace c10 {
struct Device {
    int8_t type;
    int8_t index;
};
}
#endif
