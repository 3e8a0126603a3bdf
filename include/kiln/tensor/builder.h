// Builds Tensor-IR primitives with PyTorch's conventions (broadcasting, negative dims, keepdim), so the
// decompositions in tensor-lower-from-torch read like the math they implement.
#pragma once
#include <string>
#include <vector>

#include "kiln/tensor/ir.h"

namespace kiln::tensor {

class Builder {
 public:
  explicit Builder(Graph& g) : g_(g) {}

  // Every node built from now on records this origin (the Torch op being lowered).
  void setOrigin(std::string origin) { origin_ = std::move(origin); }

  const Shape& shape(int node) const { return g_.nodes[node].shape; }
  DType dtype(int node) const { return g_.nodes[node].dtype; }
  int rank(int node) const { return static_cast<int>(shape(node).size()); }
  int normDim(int node, int64_t dim) const;  // negative dims count from the end; UserError when out of range

  // Elementwise over operands broadcast to a common shape. Immediates broadcast trivially.
  int elementwise(Fn fn, std::vector<Operand> operands);
  int unary(Fn fn, int x) { return elementwise(fn, {Operand{x}}); }
  int binary(Fn fn, Operand a, Operand b) { return elementwise(fn, {a, b}); }
  int cast(int x, DType to);

  int broadcastTo(int x, const Shape& shape);
  int reduce(ReduceFn fn, int x, std::vector<int> axes, bool keepdim);
  int mean(int x, const std::vector<int>& axes, bool keepdim);
  int reshape(int x, const Shape& shape);
  int permute(int x, const std::vector<int>& perm);
  int transpose(int x, int d0, int d1);
  int indexMap(int x, Shape shape, std::vector<Idx> index);
  // [..., m, k] x [..., k, n] with broadcast batch dims: Reduce(sum) of Elementwise(mul) of broadcasts.
  int matmul(int a, int b);
  // x[..., k] . w[n, k]^T (+ bias[n])
  int linear(int x, int w, int bias);
  int gather(int table, int ids);
  int concat(const std::vector<int>& parts, int axis);
  int slice(int x, int axis, int64_t start, int64_t step, int64_t length);
  // softmax(q k^T * scale + mask) v with q [.., L, E], k [.., S, E], v [.., S, Ev]; mask: additive f32 or bool
  // (true = keep), broadcast to [.., L, S]; `causal` adds the lower-triangular mask.
  int attention(int q, int k, int v, int mask, bool causal, float scale);
  // A weight holding `values` (integers for an integral dtype, exact up to 2^24).
  int constant(const Shape& shape, std::vector<float> values, const std::string& name, DType dtype = DType::F32);

 private:
  int add(Node n);
  Graph& g_;
  std::string origin_;
};

// PyTorch's broadcast of two shapes; UserError when incompatible.
Shape broadcastShapes(const Shape& a, const Shape& b, const std::string& where);

}  // namespace kiln::tensor
