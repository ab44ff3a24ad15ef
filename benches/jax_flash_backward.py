"""The JAX side of `cargo bench --bench attention_backward`: jax.grad of a
hand-written flash attention (online softmax, a fori_loop over key blocks,
causal), B=1 H=8 D=64 f32, timed as the Rust side is: jit-compiled once,
arguments on the device, min of N runs of the whole gradient.

Prints one line per length: `S <len> fwd_ms <min> bwd_ms <min>` (bwd is the
jitted value-and-gradient of sum(out * dout) with respect to q, k and v).
"""

import sys
import time

import jax
import jax.numpy as jnp
from jax import lax


def flash(q, k, v, block):
    _, _, s, d = q.shape
    scale = 1.0 / (d ** 0.5)
    qs = q * scale
    rows = jnp.arange(s)[:, None]

    def body(j, carry):
        m, l, acc = carry
        kb = lax.dynamic_slice_in_dim(k, j * block, block, axis=2)
        vb = lax.dynamic_slice_in_dim(v, j * block, block, axis=2)
        logits = jnp.einsum("bhqd,bhkd->bhqk", qs, kb)
        cols = j * block + jnp.arange(block)[None, :]
        logits = jnp.where(cols <= rows, logits, -jnp.inf)
        m_new = jnp.maximum(m, logits.max(-1, keepdims=True))
        p = jnp.exp(logits - m_new)
        alpha = jnp.exp(m - m_new)
        l = l * alpha + p.sum(-1, keepdims=True)
        acc = acc * alpha + jnp.einsum("bhqk,bhkd->bhqd", p, vb)
        return m_new, l, acc

    shape = q.shape[:3] + (1,)
    init = (
        jnp.full(shape, -1e30, q.dtype),
        jnp.zeros(shape, q.dtype),
        jnp.zeros(q.shape, q.dtype),
    )
    _, l, acc = lax.fori_loop(0, s // block, body, init)
    return acc / l


def best(f, args, runs):
    jax.block_until_ready(f(*args))
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        jax.block_until_ready(f(*args))
        times.append(time.perf_counter() - t)
    return min(times) * 1e3


def main():
    lengths = [int(x) for x in (sys.argv[1] if len(sys.argv) > 1 else "2048,8192").split(",")]
    block = int(sys.argv[2]) if len(sys.argv) > 2 else 256
    key = jax.random.PRNGKey(0)
    for s in lengths:
        ks = jax.random.split(key, 4)
        q, k, v, dout = (jax.random.uniform(x, (1, 8, s, 64), jnp.float32, -0.5, 0.5) for x in ks)
        fwd = jax.jit(lambda q, k, v: flash(q, k, v, block))
        loss = lambda q, k, v, dout: jnp.sum(flash(q, k, v, block) * dout)
        bwd = jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2)))
        runs = 7 if s <= 2048 else 3
        f = best(fwd, (q, k, v), runs)
        b = best(bwd, (q, k, v, dout), runs)
        print(f"S {s} fwd_ms {f:.3f} bwd_ms {b:.3f}", flush=True)


if __name__ == "__main__":
    main()
