// The headers most test programs include, precompiled once for all of them
// (tests/support/CMakeLists.txt, octet_test_pch). A test still includes what
// it uses; with the precompiled header those includes cost nothing.
//
// Qt Core, not Qt Test: <QtTest> (which includes all of Qt Core) reads
// QT_TESTCASE_BUILDDIR and QT_TESTCASE_SOURCEDIR, which Qt's CMake package
// defines per test folder, so a header holding it would fit one folder only.
// Qt Test's own headers are a small part of the cost.
#pragma once

#include <QtCore/QtCore>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "octet/base/json.h"
