"""Sliding-window layers hold at most their window of KV cache (newcomer review: the KV cache of
`memory --inference` was not windowed for sliding_window models; serving concurrency likewise)."""

from llmpar.cost.serving_capacity import max_concurrency
from llmpar.specs.registry import load_model


def test_inference_kv_cache_windowed_gpt_oss(cli):
    """gpt-oss-120b: 36 layers, 8 KV heads of d_head 64, a 128-token window on every other layer.
    At tp 8 one GPU holds one KV head: 2 x 1 x 64 x 2 B = 256 B per token per layer.
    Tokens kept per layer at context 32,768: 0.5 x min(32,768, 128) + 0.5 x 32,768 = 16,448.
    Batch 4: 4 x 36 x 256 x 16,448 = 606,339,072 B (unwindowed it would be 1,207,959,552 B)."""
    d = cli("memory", "gpt-oss-120b", "--inference", "--tp", "8", "--batch", "4",
                 "--context", "32768", "--hardware", "h100-sxm", "--json").json()
    assert d["memory"]["kv_cache_bytes"] == 606_339_072


def test_inference_kv_cache_unwindowed_when_context_inside_window(cli):
    """gemma-2-9b (window 4,096 on half the layers): at context 4,096 the window holds the whole
    context, so every layer keeps 4,096 tokens: 2 x 8 x 256 x 2 B = 8,192 B per token per layer,
    x 42 layers x 4,096 tokens x batch 1 = 1,409,286,144 B at tp 1."""
    d = cli("memory", "gemma-2-9b", "--inference", "--batch", "1", "--context", "4096",
                 "--hardware", "h100-sxm", "--json").json()
    assert d["memory"]["kv_cache_bytes"] == 1_409_286_144


def test_max_concurrency_counts_window():
    """A pool of 1,088,000 full-layer tokens; a request of 2,048 tokens on gpt-oss keeps
    0.5 x 128 + 0.5 x 2,048 = 1,088 per layer on average -> 1,000 requests; mistral-7b (no window)
    keeps all 2,048 -> floor(531.25) = 531."""
    cap = {"kv_tokens": 1_088_000.0, "max_num_seqs": 1e9}
    assert max_concurrency(cap, load_model("gpt-oss-120b"), 2048) == 1000
    assert max_concurrency(cap, load_model("mistral-7b"), 2048) == 531
