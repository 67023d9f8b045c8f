/* For .ci/windows's MSVC-dialect check only: mingw-w64's headers spell some attributes for GCC
 * or for MSVC itself; under clang's MSVC mode they must come out empty. Not part of the product. */
#include <_mingw.h>
#undef __attribute__
#undef __MINGW_ATTRIB_NORETURN
#define __MINGW_ATTRIB_NORETURN
#undef __MINGW_ATTRIB_DEPRECATED
#define __MINGW_ATTRIB_DEPRECATED
