// Every linear layer of a decoder layer, for the loader (model_load.cpp) and
// the backend placement (model.cpp).
#pragma once

#include <vector>

namespace octet::engine {

// Every linear layer of a decoder layer: attention, the dense MLP, and a
// mixture-of-experts block's router, experts and shared expert. `Layer` is
// LayerWeights or const LayerWeights.
template <typename Layer>
auto LayerLinears(Layer& L) {
  using Ptr = decltype(&L.q);
  std::vector<Ptr> out = {&L.q, &L.k, &L.v, &L.o, &L.gate, &L.up, &L.down};
  if (!L.is_moe()) return out;
  out.push_back(&L.moe.router);
  for (auto& g : L.moe.experts) out.insert(out.end(), {&g.gate, &g.up, &g.down});
  out.insert(out.end(), {&L.moe.shared.gate, &L.moe.shared.up, &L.moe.shared.down});
  return out;
}

}  // namespace octet::engine
