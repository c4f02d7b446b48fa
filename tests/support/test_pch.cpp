// The translation unit that carries octet_test_pch's precompiled header
// (test_pch.h, added by CMake); it defines nothing.
