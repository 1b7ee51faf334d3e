/* One #include, chosen by its compiler's command line:
 * tests/build/include_bounds_test.sh compiles this file once per case of the
 * manifest CMakeLists.txt writes, against the staged include folder of one
 * library, with PT_BOUNDS_HEADER naming the header to try. A header outside
 * the library's include set must not be found. */
#include PT_BOUNDS_HEADER

int pt_bounds_unit;
