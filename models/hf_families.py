"""Tiny random-weight transformers models of the families kiln takes in (issues 9, 44), traced on input_ids -> logits:
GPT-2, GPT-NeoX, Phi, Phi-3, StableLM, Falcon, Qwen2, Qwen3, Mistral, Gemma, Gemma-2, GPT-J, Cohere, OLMo, and the
mixtures of experts Mixtral, Qwen2-MoE, Qwen3-MoE, DeepSeek-V2, DeepSeek-V3 and GPT-OSS (their experts in transformers' batched_mm form, EXPERTS). Each is
built from a config
(nothing is downloaded), its parameters overwritten with seeded normals (hf_llama.randomize_inplace_), and traced
through hf_llama.LogitsOnly with its inputs recorded; the shapes are those of the family's tiny test models:
hidden 64, 2 layers, 4 heads, vocab 256, 16 tokens, each family's own options (grouped KV heads, partial rotary,
sliding windows, multi-query, logit softcapping) switched on where it has them.

    python3 models/hf_families.py              # every family -> models/fixtures/hf_<family>_tiny.pt
    python3 models/hf_families.py gpt2 phi3    # some of them
    python3 models/hf_families.py --bf16       # hf_gpt_neox_tiny_bf16.pt, hf_gemma2_tiny_bf16.pt (BF16_FAMILIES)
    python3 models/hf_families.py --default-cache   # hf_qwen2_tiny_cache.pt: traced as users trace, the config's
                                               # use_cache=True and a wrapper returning model(ids).logits
    python3 models/hf_families.py --encoders    # hf_bert_tiny.pt, hf_roberta_tiny.pt, hf_distilbert_tiny.pt: encoders
                                               # on input_ids, attention_mask (and token_type_ids)
    python3 models/hf_families.py --grouped     # hf_<family>_tiny_grouped.pt: the mixtures of experts (EXPERTS) with
                                               # transformers' default grouped_mm experts
    python3 models/hf_families.py --real qwen2 --dtype bf16 --device cuda -o /tmp/qwen2.pt
                                               # 2 layers at the family's real layer shapes (REAL), 128 tokens
"""
import pathlib
import sys

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from hf_llama import LogitsOnly, _no_init_weights, example_inputs, randomize_inplace_  # noqa: E402
from kiln_export import export  # noqa: E402

COMMON = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, vocab_size=256,
              max_position_embeddings=128)

# family -> (config class, model class, config arguments, attention implementation)
FAMILIES = {
    "gpt2": ("GPT2Config", "GPT2LMHeadModel", dict(n_embd=64, n_layer=2, n_head=4, vocab_size=256, n_positions=128,
                                                   bos_token_id=0, eos_token_id=0), "sdpa"),
    "gpt_neox": ("GPTNeoXConfig", "GPTNeoXForCausalLM", dict(COMMON, rotary_pct=0.25), "sdpa"),
    "phi": ("PhiConfig", "PhiForCausalLM", dict(COMMON, partial_rotary_factor=0.5), "sdpa"),
    "phi3": ("Phi3Config", "Phi3ForCausalLM", dict(COMMON, num_key_value_heads=2, pad_token_id=0, bos_token_id=0,
                                                   eos_token_id=0), "sdpa"),
    "stablelm": ("StableLmConfig", "StableLmForCausalLM", dict(COMMON, num_key_value_heads=2,
                                                               partial_rotary_factor=0.25), "sdpa"),
    "falcon": ("FalconConfig", "FalconForCausalLM", dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                                         vocab_size=256, new_decoder_architecture=False,
                                                         multi_query=True, bos_token_id=0, eos_token_id=0), "sdpa"),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", dict(COMMON, num_key_value_heads=2), "sdpa"),
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", dict(COMMON, num_key_value_heads=2, head_dim=16), "sdpa"),
    "mistral": ("MistralConfig", "MistralForCausalLM", dict(COMMON, num_key_value_heads=2, sliding_window=8), "sdpa"),
    "gemma": ("GemmaConfig", "GemmaForCausalLM", dict(COMMON, num_key_value_heads=1, head_dim=16), "sdpa"),
    # eager attention: the softcapped scores between the product and the softmax are traced as they are written
    "gemma2": ("Gemma2Config", "Gemma2ForCausalLM", dict(COMMON, num_key_value_heads=2, head_dim=16,
                                                         sliding_window=8), "eager"),
    # issue 44: GPT-J's and Cohere's interleaved rotary (aten::stack of the rotated halves), OLMo's clip_qkv
    # (aten::clamp_ on q, k, v; small enough here that the clamp bites)
    "gptj": ("GPTJConfig", "GPTJForCausalLM", dict(n_embd=64, n_layer=2, n_head=4, vocab_size=256, n_positions=128,
                                                   rotary_dim=8, bos_token_id=0, eos_token_id=0), "eager"),
    "cohere": ("CohereConfig", "CohereForCausalLM", dict(COMMON, num_key_value_heads=2, pad_token_id=0, bos_token_id=0,
                                                         eos_token_id=0), "sdpa"),
    "olmo": ("OlmoConfig", "OlmoForCausalLM", dict(COMMON, clip_qkv=0.5, pad_token_id=0, bos_token_id=0, eos_token_id=0),
             "sdpa"),
    # issue 44: mixture of experts, traced with transformers' batched_mm experts (EXPERTS): each token's chosen experts'
    # weights gathered by index into a batched product, so kiln's product reads only those experts
    "mixtral": ("MixtralConfig", "MixtralForCausalLM", dict(COMMON, num_key_value_heads=2, num_local_experts=4,
                                                           num_experts_per_tok=2), "sdpa"),
    "qwen2_moe": ("Qwen2MoeConfig", "Qwen2MoeForCausalLM", dict(COMMON, num_key_value_heads=2, num_experts=4,
                                                               num_experts_per_tok=2, moe_intermediate_size=32,
                                                               shared_expert_intermediate_size=64), "sdpa"),
    "qwen3_moe": ("Qwen3MoeConfig", "Qwen3MoeForCausalLM", dict(COMMON, num_key_value_heads=2, head_dim=16, num_experts=8,
                                                               num_experts_per_tok=2, moe_intermediate_size=32,
                                                               norm_topk_prob=True), "sdpa"),
    # sigmoid scores with a correction bias, experts chosen within the best groups (topk of groups, scatter_, gather),
    # a shared expert, a dense first layer, and multi-head latent attention (keys written through slices of new_empty)
    "deepseek_v3": ("DeepseekV3Config", "DeepseekV3ForCausalLM", dict(COMMON, num_key_value_heads=4, n_routed_experts=8,
                                                                     num_experts_per_tok=2, n_group=2, topk_group=1,
                                                                     moe_intermediate_size=32, n_shared_experts=1,
                                                                     first_k_dense_replace=1, q_lora_rank=32,
                                                                     kv_lora_rank=16, qk_rope_head_dim=8,
                                                                     qk_nope_head_dim=8, v_head_dim=16), "sdpa"),
    # DeepSeek-V2: the rotary in complex numbers (view_as_complex, view_as_real), group-limited greedy routing
    "deepseek_v2": ("DeepseekV2Config", "DeepseekV2ForCausalLM", dict(COMMON, num_key_value_heads=4, n_routed_experts=8,
                                                                     num_experts_per_tok=2, n_group=2, topk_group=1,
                                                                     topk_method="group_limited_greedy",
                                                                     moe_intermediate_size=32, n_shared_experts=1,
                                                                     first_k_dense_replace=1, q_lora_rank=32,
                                                                     kv_lora_rank=16, qk_rope_head_dim=8,
                                                                     qk_nope_head_dim=8, v_head_dim=16), "sdpa"),
    # experts with biases and a clamped gate, interleaved gate/up columns, attention sinks (max along a dim), windows
    "gpt_oss": ("GptOssConfig", "GptOssForCausalLM", dict(COMMON, intermediate_size=64, num_key_value_heads=2, head_dim=16,
                                                          num_local_experts=4, num_experts_per_tok=2, sliding_window=8),
                "eager"),
}

# Families whose experts kiln takes in transformers' batched_mm form (config._experts_implementation): the experts each
# token's router chose, gathered by index (aten::index) into a batched product (aten::bmm).
EXPERTS = {family: "batched_mm" for family in ("mixtral", "qwen2_moe", "qwen3_moe", "deepseek_v2", "deepseek_v3", "gpt_oss")}


# The layer shapes of one public checkpoint per family (hidden size, MLP width, heads, KV heads, head size, rotary
# fraction, windows as their configs give them), with 2 layers, a 32000-token vocabulary (the real ones reach 256000;
# the embedding and lm_head are a gather and one more product either way) and 2048 positions: what `--real` builds.
REAL_COMMON = dict(num_hidden_layers=2, vocab_size=32000, max_position_embeddings=2048)
REAL = {
    "gpt2": dict(n_embd=768, n_layer=2, n_head=12, vocab_size=32000, n_positions=1024, bos_token_id=0, eos_token_id=0),  # gpt2
    "gpt_neox": dict(REAL_COMMON, hidden_size=2048, intermediate_size=8192, num_attention_heads=16, rotary_pct=0.25),  # pythia-1.4b
    "phi": dict(REAL_COMMON, hidden_size=2560, intermediate_size=10240, num_attention_heads=32, partial_rotary_factor=0.4),  # phi-2
    "phi3": dict(REAL_COMMON, hidden_size=3072, intermediate_size=8192, num_attention_heads=32, num_key_value_heads=32,
                 pad_token_id=0, bos_token_id=0, eos_token_id=0),  # Phi-3-mini
    "stablelm": dict(REAL_COMMON, hidden_size=2048, intermediate_size=5632, num_attention_heads=32, num_key_value_heads=32,
                     partial_rotary_factor=0.25),  # stablelm-2-1_6b
    "falcon": dict(hidden_size=4544, num_hidden_layers=2, num_attention_heads=71, vocab_size=32000, new_decoder_architecture=False,
                   multi_query=True, bos_token_id=0, eos_token_id=0),  # falcon-7b
    "qwen2": dict(REAL_COMMON, hidden_size=3584, intermediate_size=18944, num_attention_heads=28, num_key_value_heads=4),  # Qwen2-7B
    "qwen3": dict(REAL_COMMON, hidden_size=4096, intermediate_size=12288, num_attention_heads=32, num_key_value_heads=8,
                  head_dim=128),  # Qwen3-8B
    "mistral": dict(REAL_COMMON, hidden_size=4096, intermediate_size=14336, num_attention_heads=32, num_key_value_heads=8,
                    sliding_window=4096),  # Mistral-7B
    "gemma": dict(REAL_COMMON, hidden_size=2048, intermediate_size=16384, num_attention_heads=8, num_key_value_heads=1,
                  head_dim=256),  # gemma-2b
    "gemma2": dict(REAL_COMMON, hidden_size=2304, intermediate_size=9216, num_attention_heads=8, num_key_value_heads=4,
                   head_dim=256, sliding_window=4096),  # gemma-2-2b
    "mixtral": dict(REAL_COMMON, hidden_size=4096, intermediate_size=14336, num_attention_heads=32, num_key_value_heads=8,
                    num_local_experts=8, num_experts_per_tok=2),  # Mixtral-8x7B
    "qwen2_moe": dict(REAL_COMMON, hidden_size=3584, intermediate_size=18944, moe_intermediate_size=2560,
                      shared_expert_intermediate_size=20480, num_attention_heads=28, num_key_value_heads=4, num_experts=64,
                      num_experts_per_tok=8),  # Qwen2-57B-A14B
    "qwen3_moe": dict(REAL_COMMON, hidden_size=2048, intermediate_size=6144, moe_intermediate_size=768, num_attention_heads=32,
                      num_key_value_heads=4, head_dim=128, num_experts=128, num_experts_per_tok=8,
                      norm_topk_prob=True),  # Qwen3-30B-A3B
    # DeepSeek-V3's layer shapes with 32 of its 256 routed experts (8 groups of 4, the best 4 groups), both layers MoE
    "deepseek_v3": dict(REAL_COMMON, hidden_size=7168, intermediate_size=18432, moe_intermediate_size=2048,
                        num_attention_heads=128, num_key_value_heads=128, n_routed_experts=32, num_experts_per_tok=8,
                        n_group=8, topk_group=4, n_shared_experts=1, first_k_dense_replace=0, q_lora_rank=1536,
                        kv_lora_rank=512, qk_rope_head_dim=64, qk_nope_head_dim=128, v_head_dim=128),
    "gpt_oss": dict(REAL_COMMON, hidden_size=2880, intermediate_size=2880, num_attention_heads=64, num_key_value_heads=8,
                    head_dim=64, num_local_experts=32, num_experts_per_tok=4, sliding_window=128),  # gpt-oss-20b
}


def build(family, seed=0, real=False, experts=None):
    """The family's model (tiny, or at REAL's shapes), its experts in `experts`' form (default EXPERTS')."""
    import transformers
    config_cls, model_cls, args, attention = FAMILIES[family]
    config = getattr(transformers, config_cls)(**(REAL[family] if real else args))
    config._attn_implementation = attention
    if family in EXPERTS:
        config._experts_implementation = experts or EXPERTS[family]
    config.use_cache = False
    torch.manual_seed(seed)
    with _no_init_weights():
        model = getattr(transformers, model_cls)(config)
    randomize_inplace_(model, seed=seed)
    return LogitsOnly(model.eval()).eval()


def main(argv=None):
    families = (argv if argv is not None else sys.argv[1:]) or list(FAMILIES)
    fixtures = pathlib.Path(__file__).resolve().parent / "fixtures"
    for family in families:
        model = build(family)
        export(model, example_inputs(256), fixtures / f"hf_{family}_tiny.pt")


# Families whose attention kiln's bf16 flash kernel takes in a form none of the others have: GPT-NeoX adds a bias to v
# (it leaves the weighted sum), Gemma-2's eager p·v writes an extra extent-1 axis after softcapped, windowed scores.
BF16_FAMILIES = ["gpt_neox", "gemma2"]


class PlainLogits(torch.nn.Module):
    """forward(input_ids) -> model(input_ids).logits: the model's config decides use_cache (True by default), as in a
    user's own wrapper; the DynamicCache it fills starts from legacy empty tensors and is dropped (dead code)."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids):
        return self.model(input_ids).logits


DEFAULT_CACHE_FAMILIES = ["qwen2"]


def main_default_cache(argv=None):
    """hf_<family>_tiny_cache.pt: the tiny model with its config's default use_cache, traced through PlainLogits."""
    import transformers
    fixtures = pathlib.Path(__file__).resolve().parent / "fixtures"
    for family in argv or DEFAULT_CACHE_FAMILIES:
        config_cls, model_cls, args, attention = FAMILIES[family]
        config = getattr(transformers, config_cls)(**args)
        config._attn_implementation = attention
        assert config.use_cache, f"{family}'s config does not default to use_cache=True"
        with _no_init_weights():
            model = getattr(transformers, model_cls)(config)
        randomize_inplace_(model, seed=0)
        export(PlainLogits(model.eval()).eval(), example_inputs(256), fixtures / f"hf_{family}_tiny_cache.pt")


def main_bf16(argv=None):
    """hf_<family>_tiny_bf16.pt: the same models traced in bf16 (model.to(torch.bfloat16))."""
    families = argv or BF16_FAMILIES
    fixtures = pathlib.Path(__file__).resolve().parent / "fixtures"
    for family in families:
        export(build(family).to(torch.bfloat16), example_inputs(256), fixtures / f"hf_{family}_tiny_bf16.pt")


# Encoders (issue 44), traced on (input_ids, attention_mask[, token_type_ids]) -> last_hidden_state at batch 2 with the
# second row padded: the padding mask built from input data (BERT reads it as mask[batch_idx, kv_idx]; RoBERTa also
# counts positions with an int32 cumsum of input_ids != pad). type_vocab_size 8 and pad id 0 keep kiln's random test ids
# (0..7) inside the tables.
ENC_COMMON = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, vocab_size=256,
                  max_position_embeddings=128, type_vocab_size=8, pad_token_id=0)
ENCODERS = {
    "bert": ("BertConfig", "BertModel", ENC_COMMON, True),
    "roberta": ("RobertaConfig", "RobertaModel", ENC_COMMON, True),
    "distilbert": ("DistilBertConfig", "DistilBertModel", dict(dim=64, hidden_dim=128, n_layers=2, n_heads=4,
                                                                vocab_size=256, max_position_embeddings=128,
                                                                pad_token_id=0), False),
}


class Encoder(torch.nn.Module):
    """forward(input_ids, attention_mask[, token_type_ids]) -> the encoder's last hidden state."""

    def __init__(self, model, token_types):
        super().__init__()
        self.model = model
        self.token_types = token_types

    def forward(self, input_ids, attention_mask, token_type_ids=None):
        extra = {"token_type_ids": token_type_ids} if self.token_types else {}
        return self.model(input_ids=input_ids, attention_mask=attention_mask, **extra).last_hidden_state


def main_encoders(argv=None):
    """hf_<encoder>_tiny.pt: BERT, RoBERTa and DistilBERT (ENCODERS) with attention-mask inputs."""
    import transformers
    fixtures = pathlib.Path(__file__).resolve().parent / "fixtures"
    for family in argv or list(ENCODERS):
        config_cls, model_cls, args, token_types = ENCODERS[family]
        config = getattr(transformers, config_cls)(**args)
        config._attn_implementation = "sdpa"
        with _no_init_weights():
            model = getattr(transformers, model_cls)(config)
        randomize_inplace_(model, seed=0)
        g = torch.Generator().manual_seed(1)
        inputs = {"input_ids": torch.randint(1, 256, (2, 16), generator=g), "attention_mask": torch.ones(2, 16, dtype=torch.int64)}
        inputs["attention_mask"][1, 11:] = 0
        if token_types:
            inputs["token_type_ids"] = (torch.arange(16) >= 8).to(torch.int64).expand(2, 16).contiguous()
        export(Encoder(model.eval(), token_types).eval(), inputs, fixtures / f"hf_{family}_tiny.pt")


def main_grouped(argv=None):
    """hf_<family>_tiny_grouped.pt: the mixtures of experts with transformers' default grouped_mm experts (sorted by
    expert, counted with histc and cumsum, products by torch._grouped_mm)."""
    fixtures = pathlib.Path(__file__).resolve().parent / "fixtures"
    for family in argv or list(EXPERTS):
        export(build(family, experts="grouped_mm"), example_inputs(256), fixtures / f"hf_{family}_tiny_grouped.pt")


def main_real(argv):
    """One family at its real layer shapes (REAL), traced on input_ids [1, SEQ] in DTYPE on DEVICE, written to -o."""
    import argparse
    ap = argparse.ArgumentParser(description=main_real.__doc__)
    ap.add_argument("family", choices=sorted(REAL))
    ap.add_argument("--dtype", choices=["f32", "bf16", "f16"], default="f32")
    ap.add_argument("--device", default="cpu", help="trace here (transformers' traces pin the device of their masks)")
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("-o", "--output", type=pathlib.Path, required=True)
    a = ap.parse_args(argv)
    if a.output.resolve().parent == pathlib.Path(__file__).resolve().parent / "fixtures":
        sys.exit("refusing to write a real-shape model into models/fixtures")
    dtype = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}[a.dtype]
    model = build(a.family, real=True).to(dtype).to(a.device)
    inputs = {k: v.to(a.device) for k, v in example_inputs(REAL[a.family]["vocab_size"], seq=a.seq).items()}
    export(model, inputs, a.output)


if __name__ == "__main__":
    if "--real" in sys.argv:
        main_real([a for a in sys.argv[1:] if a != "--real"])
    elif "--default-cache" in sys.argv:
        main_default_cache([a for a in sys.argv[1:] if a != "--default-cache"])
    elif "--encoders" in sys.argv:
        main_encoders([a for a in sys.argv[1:] if a != "--encoders"])
    elif "--grouped" in sys.argv:
        main_grouped([a for a in sys.argv[1:] if a != "--grouped"])
    elif "--bf16" in sys.argv:
        main_bf16([a for a in sys.argv[1:] if a != "--bf16"])
    else:
        main()
