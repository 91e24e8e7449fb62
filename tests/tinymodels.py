"""Tiny random transformers models built in the tests (float64 on CPU, so cached and recomputed
passes agree to the last bit that matters for argmax)."""

from __future__ import annotations

import torch

VOCAB = 96
MASK_ID = VOCAB - 1
EOS_ID = VOCAB - 2


def _finish(model, dtype=torch.float64):
    model.config.mask_token_id = MASK_ID
    with torch.no_grad():  # peaky outputs: confidences spread over (0, 1) like a trained model's
        model.lm_head.weight.mul_(40.0)
    return model.to(dtype).eval()


def tiny_llama(seed: int = 0, dtype=torch.float64):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                         eos_token_id=EOS_ID, bos_token_id=1, pad_token_id=0, attn_implementation="sdpa")
    return _finish(LlamaForCausalLM(config), dtype)


def tiny_qwen3(seed: int = 0, dtype=torch.float64):
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(seed)
    config = Qwen3Config(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=512,
                         eos_token_id=EOS_ID, bos_token_id=1, pad_token_id=0, attn_implementation="sdpa")
    return _finish(Qwen3ForCausalLM(config), dtype)


def tiny_hybrid(seed: int = 0, dtype=torch.float64):
    """A Qwen3.5-MoE text model: three Gated-DeltaNet layers and one full-attention layer."""
    from transformers.models.qwen3_5_moe.configuration_qwen3_5_moe import Qwen3_5MoeTextConfig
    from transformers.models.qwen3_5_moe.modeling_qwen3_5_moe import Qwen3_5MoeForCausalLM

    torch.manual_seed(seed)
    config = Qwen3_5MoeTextConfig(
        vocab_size=VOCAB, hidden_size=64, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
        head_dim=16, linear_conv_kernel_dim=4, linear_key_head_dim=16, linear_value_head_dim=16,
        linear_num_key_heads=2, linear_num_value_heads=4, moe_intermediate_size=32,
        shared_expert_intermediate_size=32, num_experts_per_tok=2, num_experts=4, max_position_embeddings=512,
        layer_types=["linear_attention", "linear_attention", "full_attention", "linear_attention"],
        eos_token_id=EOS_ID, bos_token_id=1, pad_token_id=0)
    config._attn_implementation = "sdpa"
    config._experts_implementation = "eager"  # grouped_mm has no float64 kernel
    return _finish(Qwen3_5MoeForCausalLM(config), dtype)
