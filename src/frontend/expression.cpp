// kiln/frontend/expression.h: the expression traced by a Python script kiln carries, run as `python3 -c SCRIPT EXPR
// OUT` (no shell: the expression is one argument). The script prints one line on failure and exits 1.
#include "kiln/frontend/expression.h"

#include <fmt/format.h>

#include <cstdlib>
#include <system_error>

#include "kiln/support/error.h"
#include "kiln/support/process.h"

namespace kiln::frontend {
namespace {

namespace fs = std::filesystem;

// The outermost call f(args, kwargs) evaluated in parts: f, then each argument; the tensor arguments become the traced
// forward's named inputs x0, x1, ... (a generated forward, so that TorchScript records those names).
constexpr const char* kTraceScript = R"PY(
import ast, json, sys
expr, out = sys.argv[1], sys.argv[2]
try:
    import torch
except Exception as e:
    print(f"python3 cannot import torch ({type(e).__name__}: {e}); install it (scripts/setup.sh)".splitlines()[0], file=sys.stderr)
    sys.exit(1)
try:
    torch.manual_seed(0)
    tree = ast.parse(expr.strip(), mode="eval")
    call = tree.body
    if not isinstance(call, ast.Call):
        raise ValueError("the expression is not a call: write f(args), e.g. torch.softmax(torch.randn(4, 512), -1)")
    scope = {"torch": torch, "nn": torch.nn, "F": torch.nn.functional}
    value = lambda node: eval(compile(ast.Expression(node), "<-c>", "eval"), dict(scope))
    fn = value(call.func)
    args = [value(a) for a in call.args]
    kwargs = {k.arg: value(k.value) for k in call.keywords if k.arg is not None}
    tensors = [i for i, a in enumerate(args) if isinstance(a, torch.Tensor)]
    if not tensors:
        raise ValueError("the call passes no tensor argument to trace: give it one, e.g. torch.randn(4, 512)")
    names = [f"x{i}" for i in range(len(tensors))]

    class Expression(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fn = fn

        def call(self, *xs):
            full = list(args)
            for i, x in zip(tensors, xs):
                full[i] = x
            return self.fn(*full, **kwargs)

    source = f"def forward(self, {', '.join(names)}):\n    return self.call({', '.join(names)})\n"
    defined = {}
    exec(source, {}, defined)
    Expression.forward = defined["forward"]
    with torch.no_grad():
        traced = torch.jit.trace(Expression().eval(), tuple(args[i] for i in tensors), check_trace=False)
    dtypes = {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16", torch.int64: "i64", torch.bool: "bool"}
    inputs = []
    for name, i in zip(names, tensors):
        if args[i].dtype not in dtypes:
            raise ValueError(f"argument {i} is a {args[i].dtype} tensor; kiln takes f32, f16, bf16, int64 and bool inputs")
        inputs.append({"name": name, "shape": list(args[i].shape), "dtype": dtypes[args[i].dtype]})
    torch.jit.save(traced, out, _extra_files={"kiln_inputs.json": json.dumps({"inputs": inputs})})
except Exception as e:
    print(f"{type(e).__name__}: {e}".splitlines()[0], file=sys.stderr)
    sys.exit(1)
)PY";

}  // namespace

TracedExpression::~TracedExpression() {
  std::error_code ec;
  fs::remove_all(dir_, ec);  // (never throws: a leftover temporary directory is all a failure leaves)
}

std::unique_ptr<TracedExpression> traceExpression(const std::string& expr) {
  if (expr.find_first_not_of(" \t\n") == std::string::npos) usageError("-c needs an expression, e.g. -c \"torch.softmax(torch.randn(4, 512), -1)\"");
  std::string pattern = (fs::temp_directory_path() / "kiln-expression-XXXXXX").string();
  if (!mkdtemp(pattern.data())) userError("-c: cannot make a temporary directory under {}", fs::temp_directory_path().string());
  auto traced = std::make_unique<TracedExpression>(pattern);
  const char* python = std::getenv("KILN_PYTHON");
  const std::string interpreter = python && *python ? python : "python3";
  const ProcessResult r = runProgram({interpreter, "-c", kTraceScript, expr, traced->model().string()}, "",
                                     "install Python 3 with torch (scripts/setup.sh) or set KILN_PYTHON");
  std::string message = r.output;
  while (!message.empty() && (message.back() == '\n' || message.back() == '\r')) message.pop_back();
  if (const size_t last = message.rfind('\n'); last != std::string::npos) message = message.substr(last + 1);
  if (r.exitStatus != 0 || !fs::exists(traced->model()))
    userError("-c {}: {}", expr, message.empty() ? fmt::format("{} exited with status {}", interpreter, r.exitStatus) : message);
  return traced;
}

}  // namespace kiln::frontend
