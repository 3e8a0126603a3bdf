"""Tiny random-weight transformers models of the families kiln takes in (issue 9), traced on input_ids -> logits:
GPT-2, GPT-NeoX, Phi, Phi-3, StableLM, Falcon, Qwen2, Qwen3, Mistral, Gemma, Gemma-2. Each is built from a config
(nothing is downloaded), its parameters overwritten with seeded normals (hf_llama.randomize_inplace_), and traced
through hf_llama.LogitsOnly with its inputs recorded; the shapes are those of the family's tiny test models:
hidden 64, 2 layers, 4 heads, vocab 256, 16 tokens, each family's own options (grouped KV heads, partial rotary,
sliding windows, multi-query, logit softcapping) switched on where it has them.

    python3 models/hf_families.py              # every family -> models/fixtures/hf_<family>_tiny.pt
    python3 models/hf_families.py gpt2 phi3    # some of them
    python3 models/hf_families.py --bf16       # hf_gpt_neox_tiny_bf16.pt, hf_gemma2_tiny_bf16.pt (BF16_FAMILIES)
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
}


def build(family, seed=0):
    import transformers
    config_cls, model_cls, args, attention = FAMILIES[family]
    config = getattr(transformers, config_cls)(**args)
    config._attn_implementation = attention
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


def main_bf16(argv=None):
    """hf_<family>_tiny_bf16.pt: the same models traced in bf16 (model.to(torch.bfloat16))."""
    families = argv or BF16_FAMILIES
    fixtures = pathlib.Path(__file__).resolve().parent / "fixtures"
    for family in families:
        export(build(family).to(torch.bfloat16), example_inputs(256), fixtures / f"hf_{family}_tiny_bf16.pt")


if __name__ == "__main__":
    if "--bf16" in sys.argv:
        main_bf16([a for a in sys.argv[1:] if a != "--bf16"])
    else:
        main()
