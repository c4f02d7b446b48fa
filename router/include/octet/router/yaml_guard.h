// Checks a YAML text's shape before it is loaded into a tree, in one pass over
// its events (no alias is expanded while checking):
//   * exactly one document (a second one would be ignored silently);
//   * no tags other than YAML's own (an unknown "!tag" means a file meant for
//     some other program, or a typo);
//   * what aliases expand to stays bounded: each alias counts the size of the
//     node it names, so a small file of many aliases of one large anchored
//     node (or of nested anchors, the "billion laughs") is refused before a
//     loader or a checker walks the expanded tree.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace octet::router {

struct YamlShapeLimits {
  // Bytes of scalar text plus one per node, with every alias counted at the
  // size of its anchor's node.
  int64_t max_expanded_bytes = int64_t{8} << 20;
};

struct YamlShapeIssue {
  int line = 0;  // 1-based; 0 when unknown
  int column = 0;
  std::string message;  // empty: the text is fine
  bool ok() const { return message.empty(); }
};

// The first problem found, or an ok() issue. Syntax errors are left to the
// loader (it reports them with their place), except where they stop this pass.
YamlShapeIssue CheckYamlShape(std::string_view text, const YamlShapeLimits& limits = {});

}  // namespace octet::router
