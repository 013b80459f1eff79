"""Vectorizable math for TVM on CPU.

Without these passes LLVM emits scalar libm calls (expf, erff, logf, sincosf) inside
pointwise, softmax, LayerNorm and GELU kernels, which keeps them from vectorizing
(docs/tvm-tuning.md shows the assembly). TVM's ``FastMathTransform`` replaces ``exp``,
``tanh``, ``erf`` and ``softmax`` where they are Relax ops; GELU's ``erf`` only appears
when ``nn.gelu`` is legalized, so ``FastGelu`` first rewrites GELU with TVM's own
``fast_erf``. ``--tvm-fast-math off`` keeps the exact path.
"""
from __future__ import annotations

import math


def math_passes(fast: bool) -> list:
    from tvm import relax

    return [fast_gelu_pass(), relax.transform.FastMathTransform()] if fast else []


def _gelu_with_fast_erf(x):
    """x * (1/2 + 1/2 erf(x / sqrt 2)), the exact GELU's formula, with topi.fast_erf."""
    from tvm import tirx, topi

    half = tirx.const(0.5, x.dtype)
    inv_sqrt2 = tirx.const(1.0 / math.sqrt(2.0), x.dtype)
    return topi.multiply(x, topi.add(half, topi.multiply(half, topi.fast_erf(topi.multiply(x, inv_sqrt2)))))


def fast_gelu_pass():
    import tvm
    from tvm import relax
    from tvm.relax import PyExprMutator, expr_functor

    @expr_functor.mutator
    class FastGelu(PyExprMutator):
        def visit_call_(self, call):
            if isinstance(call.op, tvm.ir.Op) and call.op.name == "relax.nn.gelu":
                return self.builder_.call_te(_gelu_with_fast_erf, self.visit_expr(call.args[0]),
                                             primfunc_name_hint="fast_gelu")
            return super().visit_call_(call)

    @tvm.transform.module_pass(opt_level=0, name="FastGelu")
    def _pass(mod, _ctx):
        mutator = FastGelu(mod)
        for gv, func in mod.functions_items():
            if isinstance(func, relax.Function):
                mutator.builder_.update_func(gv, mutator.visit_expr(func))
        return mutator.builder_.get()

    return _pass
