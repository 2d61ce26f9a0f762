"""MultiHeadAttention (masks, KV cache) and the Transformer stacks against torch.nn."""
from __future__ import annotations

import numpy as np
import pytest

import ember as em
from ember import nn
from ember.errors import ShapeError

from ._ref import close, et, linear_from, load, mha_from, norm_from, randn, torch, tt

tnn = torch.nn
D, H = 8, 2


def _pair(dropout=0.0):
    ref = tnn.MultiheadAttention(D, H, dropout=dropout, batch_first=True)
    m = load(nn.MultiHeadAttention(D, H, dropout=dropout), mha_from("", ref))
    return ref.eval(), m.eval()


def test_mha_self_and_cross_attention():
    ref, m = _pair()
    q, kv = randn(2, 5, D), randn(2, 7, D)
    ctx, w = m(et(q))
    rc, rw = ref(tt(q), tt(q), tt(q))
    close(ctx, rc)
    close(w.mean(1), rw)  # torch averages the heads' weights
    ctx, w = m(et(q), et(kv), et(kv))
    rc, rw = ref(tt(q), tt(kv), tt(kv))
    close(ctx, rc)
    assert tuple(w.shape) == (2, H, 5, 7)


def test_mha_padding_and_attention_masks():
    ref, m = _pair()
    q, kv = randn(2, 4, D), randn(2, 6, D)
    pad = np.zeros((2, 6), bool)
    pad[0, 4:] = True
    pad[1, 5:] = True
    attn = np.random.default_rng(3).random((4, 6)) < 0.3
    attn[:, 0] = False  # keep one key per row
    batch_attn = np.stack([attn, ~attn | (np.arange(6) == 1)])
    batch_attn[:, :, 1] = False
    out = m(et(q), et(kv), et(kv), mask_pad=em.tensor(pad), mask_attn=em.tensor(attn))
    rc, rw = ref(tt(q), tt(kv), tt(kv), key_padding_mask=torch.from_numpy(pad),
                 attn_mask=torch.from_numpy(attn))
    close(out.context, rc)
    close(out.weights.mean(1), rw)
    assert np.all(out.weights.numpy()[0, :, :, 4:] == 0)
    out = m(et(q), et(kv), et(kv), mask_attn=em.tensor(batch_attn))
    rc, _ = ref(tt(q), tt(kv), tt(kv),
                attn_mask=torch.from_numpy(batch_attn).repeat_interleave(H, 0))
    close(out.context, rc)
    # float masks are added to the scores
    fmask = randn(4, 6)
    out = m(et(q), et(kv), et(kv), mask_attn=et(fmask))
    rc, _ = ref(tt(q), tt(kv), tt(kv), attn_mask=tt(fmask))
    close(out.context, rc)
    with pytest.raises(ShapeError, match="mask_pad"):
        m(et(q), et(kv), et(kv), mask_pad=em.tensor(pad[:, :5]))


def test_mha_causal_equals_explicit_mask_and_fully_masked_rows_are_finite():
    ref, m = _pair()
    x = randn(2, 5, D)
    causal = np.triu(np.ones((5, 5), bool), 1)
    out = m(et(x), causal=True)
    rc, _ = ref(tt(x), tt(x), tt(x), attn_mask=torch.from_numpy(causal))
    close(out.context, rc)
    close(nn.generate_autoregressive_mask(5), causal)
    pad = em.tensor(np.ones((2, 5), bool))
    assert np.isfinite(m(et(x), mask_pad=pad).context.numpy()).all()
    close(nn.generate_padding_mask([2, 4]), np.array([[0, 0, 1, 1], [0, 0, 0, 0]], bool))


def test_mha_kv_cache_incremental_equals_full_causal():
    _, m = _pair()
    x = randn(2, 6, D)
    full = m(et(x), causal=True).context.numpy()
    cache = nn.MhaCache()
    outs = []
    for chunk in (slice(0, 1), slice(1, 2), slice(2, 4), slice(4, 6)):
        out, cache = m.forward_cache(et(x[:, chunk]), cache)
        outs.append(out.context.numpy())
    assert cache.length == 6
    close(np.concatenate(outs, 1), full)
    # static (cross-attention) caches project the memory once
    mem = randn(2, 3, D)
    c = nn.MhaCache(static=True)
    o1, c = m.forward_cache(et(x[:, :2]), c, et(mem))
    o2, c2 = m.forward_cache(et(x[:, 2:4]), c)
    assert c2 is c
    close(o2.context, m(et(x[:, 2:4]), et(mem)).context)


def test_scaled_dot_product_attention_matches_torch():
    F = torch.nn.functional
    q, k, v = randn(2, 3, 4, 8), randn(2, 3, 6, 8), randn(2, 3, 6, 8)
    allow = np.random.default_rng(0).random((4, 6)) < 0.7
    allow[:, 0] = True
    for kw in (dict(), dict(is_causal=True), dict(scale=0.3)):
        close(nn.functional.scaled_dot_product_attention(et(q), et(k), et(v), **kw),
              F.scaled_dot_product_attention(tt(q), tt(k), tt(v), **kw))
    close(nn.functional.scaled_dot_product_attention(et(q), et(k), et(v),
                                                     em.tensor(allow)),
          F.scaled_dot_product_attention(tt(q), tt(k), tt(v), torch.from_numpy(allow)))


def _encoder_state(ref):
    state = {}
    for i, layer in enumerate(ref.layers):
        p = f"layers.{i}."
        state.update(mha_from(p + "mha.", layer.self_attn))
        state.update(linear_from(p + "pwff.linear_inner.", layer.linear1))
        state.update(linear_from(p + "pwff.linear_outer.", layer.linear2))
        state.update(norm_from(p + "norm_1.", layer.norm1))
        state.update(norm_from(p + "norm_2.", layer.norm2))
    return state


def _decoder_state(ref):
    state = {}
    for i, layer in enumerate(ref.layers):
        p = f"layers.{i}."
        state.update(mha_from(p + "self_attn.", layer.self_attn))
        state.update(mha_from(p + "cross_attn.", layer.multihead_attn))
        state.update(linear_from(p + "pwff.linear_inner.", layer.linear1))
        state.update(linear_from(p + "pwff.linear_outer.", layer.linear2))
        for j in (1, 2, 3):
            state.update(norm_from(p + f"norm_{j}.", getattr(layer, f"norm{j}")))
    return state


def _randomize_norms(ref):
    with torch.no_grad():
        for name, p in ref.named_parameters():
            if "norm" in name:
                p.copy_(torch.randn(p.shape) * 0.3 + (1.0 if name.endswith("weight") else 0))


@pytest.mark.parametrize("norm_first", [False, True])
def test_transformer_encoder_matches_torch(norm_first):
    layer = tnn.TransformerEncoderLayer(D, H, 16, dropout=0.0, activation="gelu",
                                        batch_first=True, norm_first=norm_first)
    ref = tnn.TransformerEncoder(layer, 2, enable_nested_tensor=False).eval()
    _randomize_norms(ref)
    m = nn.TransformerEncoder(D, 16, H, 2, dropout=0.0, norm_first=norm_first)
    m = load(m, _encoder_state(ref)).eval()
    x = randn(2, 5, D)
    pad = np.zeros((2, 5), bool)
    pad[1, 3:] = True
    with torch.no_grad():
        close(m(et(x)), ref(tt(x)), atol=3e-5)
        close(m(et(x), mask_pad=em.tensor(pad)),
              ref(tt(x), src_key_padding_mask=torch.from_numpy(pad)), atol=3e-5)
        causal = tnn.Transformer.generate_square_subsequent_mask(5)
        close(m(et(x), causal=True), ref(tt(x), mask=causal, is_causal=True), atol=3e-5)


@pytest.mark.parametrize("norm_first", [False, True])
def test_transformer_decoder_matches_torch_and_caches(norm_first):
    layer = tnn.TransformerDecoderLayer(D, H, 16, dropout=0.0, activation="relu",
                                        batch_first=True, norm_first=norm_first)
    ref = tnn.TransformerDecoder(layer, 2).eval()
    _randomize_norms(ref)
    m = nn.TransformerDecoder(D, 16, H, 2, dropout=0.0, norm_first=norm_first,
                              activation="relu")
    m = load(m, _decoder_state(ref)).eval()
    tgt, mem = randn(2, 5, D), randn(2, 4, D)
    mpad = np.zeros((2, 4), bool)
    mpad[0, 3] = True
    causal = tnn.Transformer.generate_square_subsequent_mask(5)
    with torch.no_grad():
        want = ref(tt(tgt), tt(mem), tgt_mask=causal, tgt_is_causal=True,
                   memory_key_padding_mask=torch.from_numpy(mpad))
    got = m(et(tgt), et(mem), memory_mask_pad=em.tensor(mpad), causal=True)
    close(got, want, atol=3e-5)
    # incremental decoding with the cache gives the same outputs
    cache = m.new_cache()
    outs = []
    for t in range(5):
        out, cache = m.forward_cache(et(tgt[:, t:t + 1]), et(mem), cache,
                                     memory_mask_pad=em.tensor(mpad))
        outs.append(out.numpy())
    assert cache.length == 5
    close(np.concatenate(outs, 1), got, atol=3e-5)


def test_encoder_forward_cache_equals_causal_forward():
    m = nn.TransformerEncoder(D, 16, H, 2, dropout=0.0, norm_first=True).eval()
    x = randn(1, 6, D)
    full = m(et(x), causal=True)
    out1, cache = m.forward_cache(et(x[:, :4]))
    out2, cache = m.forward_cache(et(x[:, 4:]), cache)
    close(em.cat([out1, out2], 1), full)


def test_attention_dropout_only_in_training():
    m = nn.MultiHeadAttention(D, H, dropout=0.5)
    x = et(randn(1, 4, D))
    ev = m.eval()
    close(ev(x).context, ev(x).context)
    em.seed(0)
    a = m(x).context.numpy()
    em.seed(0)
    b = m(x).context.numpy()
    np.testing.assert_array_equal(a, b)  # reproducible with the seed
    assert not np.allclose(a, ev(x).context.numpy())


def test_quiet_softmax_lets_a_head_attend_to_nothing():
    x = randn(3, 5) * 3
    e = np.exp(x.astype(np.float64))
    close(nn.functional.quiet_softmax(et(x)), e / (1 + e.sum(-1, keepdims=True)))
    m = nn.MultiHeadAttention(D, H, dropout=0.0, quiet_softmax=True)
    w = m(et(randn(2, 4, D))).weights.numpy()
    assert (w.sum(-1) < 1).all() and (w > 0).all()


def test_self_attention_projects_q_k_v_by_one_product():
    """A self-attention without weights asked for projects q, k and v by one product (their
    weights concatenated) and hands the packed result to the attention primitive: the output
    and every parameter's gradient as torch's."""
    from ember.backend import Autodiff, Fusion
    from tests.fusion._util import RecordingNdArray
    ref = tnn.MultiheadAttention(D, H, batch_first=True)
    inner = RecordingNdArray()
    dev = Autodiff(Fusion(inner, "c", 0)).device(0)
    m = load(nn.MultiHeadAttention(D, H, dropout=0.0), mha_from("", ref)).to_device(dev)
    x = randn(2, 5, D)
    inner.ran.clear()
    ctx = m(em.tensor(x, device=dev), need_weights=False).context
    # q/k/v by one product (three would make six), attention's two (NdArray does not list
    # the primitive: Fusion runs its decomposition), the output projection
    assert inner.ran.count("matmul") == 4 and inner.ran.count("cat") == 2, inner.ran
    rc = ref(tt(x), tt(x), tt(x), need_weights=False)[0]
    close(ctx, rc)
    grads = (ctx * ctx).sum().backward()
    (rc * rc).sum().backward()
    for lin, rows in ((m.query, slice(0, D)), (m.key, slice(D, 2 * D)),
                      (m.value, slice(2 * D, 3 * D))):
        want_w = ref.in_proj_weight.grad[rows].numpy().T
        want_b = ref.in_proj_bias.grad[rows].numpy()
        close(lin.weight.grad(grads), want_w)
        close(lin.bias.grad(grads), want_b)
