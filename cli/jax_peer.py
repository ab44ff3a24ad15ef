"""The JAX side of `tessel bench --peer PYTHON`: the JAX a skilled user would
write for each workload of the peer comparison, timed the way tessel's side
is timed (jit-compiled once, arguments on the device, the minimum of N runs,
each run waited on with block_until_ready).

Usage: python jax_peer.py WORKLOAD [WORKLOAD ...]
  attention  causal flash attention B=1 H=8 D=64 f32, S = 2048 and 8192: both
             loops traced (a fori_loop over query blocks writing with
             dynamic_update_slice; inside it a fori_loop over the key blocks
             left of the diagonal, unmasked, then the masked diagonal block),
             256 x 256 blocks; plus the time to trace and compile it
  norm       the row-wise kernels over 4096 x 1024 f32: layer_norm (scale,
             bias), rms_norm (scale), jax.nn.softmax and jax.nn.log_softmax
             over the last axis
  moe        the routed MoE layer T=4096 d=1024 ff=4096 E=8 top-2, capacity
             factor 1.25: tokens placed by expert into [E, C, d] capacity
             buffers, one batched matmul per FFN layer, GELU (tanh form)
  gemm       2048^3 f32, bf16 operands with an f32 result, s8 operands with an s32 result
  dispatch   a cached jitted x + 1 on f32[16], device-resident (median)
  scan       a recurrent cell h = tanh(h @ W + x) over T=512 steps, B=8, D=256
             f32 with lax.scan (the stacked states and the last), and
             jax.value_and_grad of the mean square of the states with respect
             to W and the inputs

Each result is one line on stdout: `<key> <milliseconds> <temp MiB or ->`.
"""

import math
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax


def data(shape, scale, dtype=jnp.float32):
    """The deterministic pattern tessel's side uses."""
    n = int(np.prod(shape))
    i = np.arange(n, dtype=np.int64)
    x = ((((i * 7919) % 1999) / 999.5) - 1.0) * scale
    return jnp.asarray(x.reshape(shape).astype(np.float32)).astype(dtype)


def best(f, args, runs):
    jax.block_until_ready(f(*args))
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        jax.block_until_ready(f(*args))
        times.append(time.perf_counter() - t)
    return min(times) * 1e3


def temp_mib(f, args):
    m = f.lower(*args).compile().memory_analysis()
    return m.temp_size_in_bytes / 1048576.0 if m is not None else float("nan")


def emit(key, ms, temp=None):
    t = "-" if temp is None else f"{temp:.2f}"
    print(f"{key} {ms:.4f} {t}", flush=True)


def flash(q, k, v, block):
    _, _, s, d = q.shape
    scale = 1.0 / math.sqrt(d)
    nq = s // block
    state = q.shape[:2] + (block, 1)

    def step(qb, kb, vb, carry, mask):
        m, l, acc = carry
        logits = jnp.einsum("bhqd,bhkd->bhqk", qb, kb)
        if mask is not None:
            logits = jnp.where(mask, logits, -jnp.inf)
        m_new = jnp.maximum(m, logits.max(-1, keepdims=True))
        p = jnp.exp(logits - m_new)
        alpha = jnp.exp(m - m_new)
        return m_new, l * alpha + p.sum(-1, keepdims=True), acc * alpha + jnp.einsum(
            "bhqk,bhkd->bhqd", p, vb
        )

    def row(i, out):
        qb = lax.dynamic_slice_in_dim(q, i * block, block, axis=2) * scale

        def full(j, carry):
            kb = lax.dynamic_slice_in_dim(k, j * block, block, axis=2)
            vb = lax.dynamic_slice_in_dim(v, j * block, block, axis=2)
            return step(qb, kb, vb, carry, None)

        init = (
            jnp.full(state, -1e30, q.dtype),
            jnp.zeros(state, q.dtype),
            jnp.zeros(q.shape[:2] + (block, d), q.dtype),
        )
        carry = lax.fori_loop(0, i, full, init)
        kb = lax.dynamic_slice_in_dim(k, i * block, block, axis=2)
        vb = lax.dynamic_slice_in_dim(v, i * block, block, axis=2)
        diag = jnp.arange(block)[None, :] <= jnp.arange(block)[:, None]
        _, l, acc = step(qb, kb, vb, carry, diag)
        return lax.dynamic_update_slice_in_dim(out, acc / l, i * block, axis=2)

    return lax.fori_loop(0, nq, row, jnp.zeros_like(q))


def attention():
    block = 256
    for s in (2048, 8192):
        q, k, v = (data((1, 8, s, 64), sc) for sc in (0.5, 0.4, 0.3))
        t = time.perf_counter()
        f = jax.jit(lambda q, k, v: flash(q, k, v, block))
        f.lower(q, k, v).compile()
        emit(f"attention_compile_{s}", (time.perf_counter() - t) * 1e3)
        emit(f"attention_{s}", best(f, (q, k, v), 5 if s <= 2048 else 3), temp_mib(f, (q, k, v)))


def layer_norm(x, g, b):
    m = x.mean(-1, keepdims=True)
    c = x - m
    v = (c * c).mean(-1, keepdims=True)
    return c * lax.rsqrt(v + 1e-5) * g + b


def rms_norm(x, g):
    return x * lax.rsqrt((x * x).mean(-1, keepdims=True) + 1e-6) * g


def norm():
    t, d = 4096, 1024
    x, g, b = data((t, d), 1.0), data((d,), 1.0), data((d,), 0.5)
    f = jax.jit(layer_norm)
    emit("layer_norm", best(f, (x, g, b), 41), temp_mib(f, (x, g, b)))
    f = jax.jit(rms_norm)
    emit("rms_norm", best(f, (x, g), 41), temp_mib(f, (x, g)))
    f = jax.jit(lambda x: jax.nn.softmax(x, axis=-1))
    emit("softmax", best(f, (x,), 41), temp_mib(f, (x,)))
    f = jax.jit(lambda x: jax.nn.log_softmax(x, axis=-1))
    emit("log_softmax", best(f, (x,), 41), temp_mib(f, (x,)))


def moe_layer(x, router, w1, w2, top_k=2, capacity_factor=1.25):
    t, d = x.shape
    e = router.shape[1]
    c = math.ceil(capacity_factor * t * top_k / e)
    logits = x @ router
    probs = jax.nn.softmax(logits, axis=-1)
    gate, idx = lax.top_k(probs, top_k)
    gate = gate / gate.sum(-1, keepdims=True)
    # Every token's first choice before any second choice, then by token.
    expert = idx.T.reshape(-1)
    g = gate.T.reshape(-1)
    token = jnp.tile(jnp.arange(t), top_k)
    onehot = jax.nn.one_hot(expert, e, dtype=jnp.int32)
    pos = jnp.take_along_axis(jnp.cumsum(onehot, axis=0) - 1, expert[:, None], axis=1)[:, 0]
    kept = pos < c
    slot = jnp.where(kept, expert * c + pos, e * c)
    buf = jnp.zeros((e * c + 1, d), x.dtype).at[slot].set(x[token])[: e * c].reshape(e, c, d)
    h = jax.nn.gelu(jnp.einsum("ecd,edf->ecf", buf, w1), approximate=True)
    y = jnp.einsum("ecf,efd->ecd", h, w2).reshape(e * c, d)
    contrib = jnp.where(kept, g, 0.0)[:, None] * y[jnp.minimum(slot, e * c - 1)]
    out = jnp.zeros((t, d), x.dtype).at[token].add(contrib)
    frac = jnp.mean(jax.nn.one_hot(idx[:, 0], e), axis=0)
    aux = e * jnp.sum(frac * probs.mean(0))
    z = jnp.mean(jax.nn.logsumexp(logits, axis=-1) ** 2)
    dropped = jnp.sum(~kept)
    return out, aux, z, dropped


def moe():
    t, d, ff, e = 4096, 1024, 4096, 8
    args = (data((t, d), 1.0), data((d, e), 0.05), data((e, d, ff), 0.03), data((e, ff, d), 0.03))
    f = jax.jit(moe_layer)
    emit("moe", best(f, args, 3), temp_mib(f, args))


def gemm():
    n = 2048
    a, b = data((n, n), 1.0), data((n, n), 1.0)
    f = jax.jit(jnp.dot)
    emit("gemm_f32", best(f, (a, b), 5), temp_mib(f, (a, b)))
    a16, b16 = a.astype(jnp.bfloat16), b.astype(jnp.bfloat16)
    f = jax.jit(lambda a, b: jnp.dot(a, b, preferred_element_type=jnp.float32))
    emit("gemm_bf16", best(f, (a16, b16), 5), temp_mib(f, (a16, b16)))
    a8, b8 = (jnp.round(x * 127.0).astype(jnp.int8) for x in (a, b))
    f = jax.jit(lambda a, b: jnp.dot(a, b, preferred_element_type=jnp.int32))
    emit("gemm_s8", best(f, (a8, b8), 5), temp_mib(f, (a8, b8)))


def dispatch():
    x = jnp.ones((16,), jnp.float32)
    f = jax.jit(lambda x: x + 1.0)
    f(x).block_until_ready()
    times = []
    for _ in range(20000):
        t = time.perf_counter()
        f(x).block_until_ready()
        times.append(time.perf_counter() - t)
    times.sort()
    emit("dispatch", times[len(times) // 2] * 1e3)


def rnn(h0, w, xs):
    def step(h, x):
        h = jnp.tanh(h @ w + x)
        return h, h

    return lax.scan(step, h0, xs)


def rnn_loss(w, xs, h0):
    _, hs = rnn(h0, w, xs)
    return (hs * hs).mean()


def scan():
    t, b, d = 512, 8, 256
    h0, w, xs = data((b, d), 0.5), data((d, d), 0.05), data((t, b, d), 1.0)
    f = jax.jit(rnn)
    emit("scan_rnn", best(f, (h0, w, xs), 21), temp_mib(f, (h0, w, xs)))
    g = jax.jit(jax.value_and_grad(rnn_loss, argnums=(0, 1)))
    emit("scan_rnn_grad", best(g, (w, xs, h0), 11), temp_mib(g, (w, xs, h0)))


WORKLOADS = {
    "attention": attention,
    "norm": norm,
    "moe": moe,
    "gemm": gemm,
    "dispatch": dispatch,
    "scan": scan,
}


def main():
    names = sys.argv[1:] or list(WORKLOADS)
    for n in names:
        if n not in WORKLOADS:
            sys.exit(f"unknown workload {n}; workloads: {', '.join(WORKLOADS)}")
    print(f"jax {jax.__version__} {jax.devices()[0].platform}", flush=True)
    for n in names:
        WORKLOADS[n]()


if __name__ == "__main__":
    main()
