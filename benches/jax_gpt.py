"""The JAX peer of `examples/gpt.rs`: the same small GPT (byte vocabulary,
RoPE, RMS norm, SwiGLU, tied embedding), the same generated corpus, batches
and initial weights, trained with optax's AdamW (warmup-cosine schedule,
global-norm clipping, no decay on the norms), checkpointed, resumed on a
fresh copy with the same losses, and decoded greedily from a KV cache.

Usage: python jax_gpt.py [--steps N]   (needs jax and optax)

What a skilled JAX user writes: one jitted train step over the parameter
pytree with the state donated, and a jitted prefill and decode step over a
contiguous per-sequence cache (paged attention in JAX is a TPU Pallas
kernel). Timed the way the Rust example is: the whole training loop, and
the second of two generations, each including its compiles.
"""

import math
import os
import sys
import tempfile
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax

VOCAB, DIM, HEADS, HIDDEN, LAYERS, SEQ, BATCH = 256, 64, 4, 128, 2, 64, 16
HEAD_DIM = DIM // HEADS
RESUMED = 10
MASK64 = (1 << 64) - 1


class Rng:
    """xorshift64, as in the Rust example."""

    def __init__(self, seed):
        self.s = seed

    def next(self):
        self.s ^= (self.s << 13) & MASK64
        self.s ^= self.s >> 7
        self.s ^= (self.s << 17) & MASK64
        return self.s

    def below(self, n):
        return self.next() % n

    def matrix(self, rows, cols):
        scale = math.sqrt(3.0 / rows)
        v = [((self.next() >> 11) / float(1 << 53) * 2.0 - 1.0) * scale for _ in range(rows * cols)]
        return np.array(v, dtype=np.float32).reshape(rows, cols)


def init(rng):
    embed = rng.matrix(VOCAB, DIM)
    blocks = []
    for _ in range(LAYERS):
        b = {"attn_norm": np.ones(DIM, np.float32)}
        for name in ["wq", "wk", "wv", "wo"]:
            b[name] = rng.matrix(DIM, DIM)
        b["mlp_norm"] = np.ones(DIM, np.float32)
        b["w_gate"], b["w_up"] = rng.matrix(DIM, HIDDEN), rng.matrix(DIM, HIDDEN)
        b["w_down"] = rng.matrix(HIDDEN, DIM)
        blocks.append(b)
    return {"embed": embed, "blocks": blocks, "final_norm": np.ones(DIM, np.float32)}


def corpus(length):
    animals = ["cat", "dog", "owl", "fox", "hen", "bee"]
    things = ["apple", "egg", "idea", "orange", "umbrella"]
    verbs = ["sees", "likes", "finds", "eats", "wants", "keeps"]
    adjs = ["small", "red", "quiet", "happy", "old"]
    rng, text = Rng(0x9E3779B97F4A7C15), ""
    while len(text) < length:
        pick = lambda words: words[rng.below(len(words))]
        adj, subject, verb = pick(adjs), pick(animals), pick(verbs)
        obj = f"a {pick(animals)}" if rng.below(2) == 0 else f"an {pick(things)}"
        text += f"the {adj} {subject} {verb} {obj}. "
    return np.frombuffer(text.encode()[:length], dtype=np.uint8).astype(np.int32)


def rms_norm(x, g):
    return x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + 1e-5) * g


def rope(x, pos):
    inv_freq = jnp.exp(jnp.arange(HEAD_DIM // 2) * (-2.0 * math.log(10_000.0) / HEAD_DIM))
    angle = pos.astype(jnp.float32)[..., None, None] * inv_freq
    a, b = x[..., : HEAD_DIM // 2], x[..., HEAD_DIM // 2 :]
    return jnp.concatenate([a * jnp.cos(angle) - b * jnp.sin(angle), b * jnp.cos(angle) + a * jnp.sin(angle)], -1)


def qkv(blk, h, pos):
    split = lambda y: y.reshape(*h.shape[:-1], HEADS, HEAD_DIM)
    return rope(split(h @ blk["wq"]), pos), rope(split(h @ blk["wk"]), pos), split(h @ blk["wv"])


def finish_block(blk, x, o):
    x = x + o.reshape(*x.shape[:-1], DIM) @ blk["wo"]
    h = rms_norm(x, blk["mlp_norm"])
    return x + (jax.nn.silu(h @ blk["w_gate"]) * (h @ blk["w_up"])) @ blk["w_down"]


def logits(p, x):
    return rms_norm(x, p["final_norm"]) @ p["embed"].T


def attend(q, k, v, mask):
    """q [B, S, H, D], k/v [B, T, H, D], mask [B, S, T] -> [B, S, H, D]."""
    s = jnp.einsum("bshd,bthd->bhst", q, k) / math.sqrt(HEAD_DIM)
    w = jax.nn.softmax(jnp.where(mask[:, None], s, -jnp.inf), axis=-1)
    return jnp.einsum("bhst,bthd->bshd", w, v)


def loss(p, tokens):
    inputs, targets = tokens[:, :-1], tokens[:, 1:]
    pos = jnp.broadcast_to(jnp.arange(SEQ), inputs.shape)
    causal = jnp.broadcast_to(jnp.tril(jnp.ones((SEQ, SEQ), bool)), (BATCH, SEQ, SEQ))
    x = p["embed"][inputs]
    for blk in p["blocks"]:
        q, k, v = qkv(blk, rms_norm(x, blk["attn_norm"]), pos)
        x = finish_block(blk, x, attend(q, k, v, causal))
    return optax.softmax_cross_entropy_with_integer_labels(logits(p, x), targets).mean()


def optimizer(steps):
    decay = lambda p: jax.tree_util.tree_map_with_path(lambda path, _: "norm" not in jax.tree_util.keystr(path), p)
    schedule = optax.warmup_cosine_decay_schedule(0.0, 3e-3, 20, steps, 3e-4)
    return optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(schedule, weight_decay=0.01, mask=decay))


def make_train_step(opt):
    def step(state, tokens):
        params, opt_state = state
        l, grads = jax.value_and_grad(loss)(params, tokens)
        updates, opt_state = opt.update(grads, opt_state, params)
        return (optax.apply_updates(params, updates), opt_state), l

    return jax.jit(step, donate_argnums=0)


def train(step, state, batches):
    losses = []
    for tokens in batches:
        state, l = step(state, tokens)
        losses.append(np.float32(l).view(np.uint32))
    return state, losses


def save(path, state):
    leaves = jax.tree_util.tree_flatten_with_path(state)[0]
    np.savez(path, **{jax.tree_util.keystr(k): np.asarray(v) for k, v in leaves})
    return len(leaves)


def load(path, like):
    with np.load(path) as f:
        flat = [jnp.asarray(f[jax.tree_util.keystr(k)]) for k, _ in jax.tree_util.tree_flatten_with_path(like)[0]]
    return jax.tree_util.tree_unflatten(jax.tree_util.tree_structure(like), flat)


@jax.jit
def prefill(p, tokens, lens, cache):
    """tokens [B, P] (padded), lens [B]; fills cache [L, 2, B, T, H, D] at 0..P."""
    b, n = tokens.shape
    pos = jnp.broadcast_to(jnp.arange(n), (b, n))
    mask = jnp.tril(jnp.ones((n, n), bool))[None] & (jnp.arange(n) < lens[:, None])[:, None, :]
    x = p["embed"][tokens]
    for l, blk in enumerate(p["blocks"]):
        q, k, v = qkv(blk, rms_norm(x, blk["attn_norm"]), pos)
        cache = cache.at[l, 0, :, :n].set(k).at[l, 1, :, :n].set(v)
        x = finish_block(blk, x, attend(q, k, v, mask))
    last = jnp.take_along_axis(x, (lens - 1)[:, None, None], axis=1)
    return cache, logits(p, last[:, 0])


@jax.jit
def decode(p, token, lens, cache):
    """token [B], written at position lens [B]; attends to 0..=lens."""
    b, t = token.shape[0], cache.shape[3]
    x = p["embed"][token][:, None]
    mask = (jnp.arange(t)[None, :] <= lens[:, None])[:, None, :]
    rows = jnp.arange(b)
    for l, blk in enumerate(p["blocks"]):
        q, k, v = qkv(blk, rms_norm(x, blk["attn_norm"]), lens[:, None])
        cache = cache.at[l, 0, rows, lens].set(k[:, 0]).at[l, 1, rows, lens].set(v[:, 0])
        x = finish_block(blk, x, attend(q, cache[l, 0], cache[l, 1], mask))
    return cache, logits(p, x[:, 0])


def generate(params, prompts, new):
    lens = np.array([len(s) for s in prompts], np.int32)
    tokens = np.zeros((len(prompts), lens.max()), np.int32)
    for i, s in enumerate(prompts):
        tokens[i, : len(s)] = list(s.encode())
    cache = jnp.zeros((LAYERS, 2, len(prompts), int(lens.max()) + new, HEADS, HEAD_DIM), jnp.float32)
    cache, out = prefill(params, tokens, lens, cache)
    texts = list(prompts)
    for step in range(new):
        token = jnp.argmax(out, axis=-1).astype(jnp.int32)
        texts = [t + chr(int(c)) for t, c in zip(texts, np.asarray(token))]
        cache, out = decode(params, token, jnp.asarray(lens), cache)
        lens = lens + 1
    return texts


def main():
    steps = int(sys.argv[sys.argv.index("--steps") + 1]) if "--steps" in sys.argv else 300
    steps = max(steps, RESUMED + 1)
    text, rng = corpus(1 << 16), Rng(7)
    batches = []
    for _ in range(steps):
        at = [rng.below(len(text) - SEQ - 1) for _ in range(BATCH)]
        batches.append(jnp.asarray(np.stack([text[a : a + SEQ + 1] for a in at])))
    opt = optimizer(steps)
    step = make_train_step(opt)

    params = jax.tree_util.tree_map(jnp.asarray, init(Rng(42)))
    state = (params, opt.init(params))
    start = time.perf_counter()
    state, losses = train(step, state, batches[: steps - RESUMED])
    path = os.path.join(tempfile.gettempdir(), f"jax-gpt-{os.getpid()}.npz")
    count = save(path, state)
    state, tail = train(step, state, batches[steps - RESUMED :])
    seconds = time.perf_counter() - start
    for i, l in enumerate(losses + tail):
        if i % 50 == 0 or i == steps - 1:
            print(f"step {i + 1:>4} loss {np.uint32(l).view(np.float32):.4f}")
    print(f"train: {steps * BATCH * SEQ / seconds:.0f} tokens/s")

    resumed, again = train(step, load(path, state), batches[steps - RESUMED :])
    print(f"resumed loss matches: {again == tail}")
    print(f"checkpoint: {path} ({count} tensors)")

    generate(resumed[0], ["the small ", "an "], 48)
    start = time.perf_counter()
    texts = generate(resumed[0], ["the small ", "an "], 48)
    print(f"decode: {2 * 48 / (time.perf_counter() - start):.0f} tokens/s")
    for t in texts:
        print(f"> {t}")
    os.remove(path)


if __name__ == "__main__":
    main()
