// `kiln compile -c EXPR` and `kiln run -c EXPR`: a PyTorch expression, as one would try an op or a module in a
// Python prompt, traced into a temporary TorchScript file that kiln then compiles like any model.
#pragma once
#include <filesystem>
#include <memory>
#include <string>

namespace kiln::frontend {

// A traced expression's file, in a fresh directory of its own that the destructor removes.
class TracedExpression {
 public:
  explicit TracedExpression(std::filesystem::path dir) : dir_(std::move(dir)) {}
  ~TracedExpression();
  TracedExpression(const TracedExpression&) = delete;
  TracedExpression& operator=(const TracedExpression&) = delete;
  std::filesystem::path model() const { return dir_ / "expression.pt"; }

 private:
  std::filesystem::path dir_;
};

// The outermost call of `expr` — a torch function (`torch.softmax(torch.randn(4, 512), -1)`) or a module built in the
// expression (`torch.nn.RMSNorm(2048)(torch.randn(1, 32, 2048))`) — traced by Python (python3, or $KILN_PYTHON) with
// torch.jit.trace on the call's own tensor arguments, which become the model's inputs x0, x1, ... in order (their
// shapes and dtypes recorded in the archive's kiln_inputs.json, as models/kiln_export.py does); its other
// arguments are constants, and torch.manual_seed(0) comes first, so a module's weights are the same every time. `torch`,
// `nn` (torch.nn) and `F` (torch.nn.functional) are in scope. UserError in one line: Python's own message where the
// expression fails, is not a call or passes no tensor; where python3 or torch cannot be found.
std::unique_ptr<TracedExpression> traceExpression(const std::string& expr);

}  // namespace kiln::frontend
