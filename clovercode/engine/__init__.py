"""The embedded Clover engine: block-diffusion decoding over transformers models.

Modules (torch and transformers are imported only inside the functions that need them):
config (validated knobs), sampler (free functions), masks (4D additive masks), cachestate
(snapshot / restore of HF caches), denoiser (prefill / denoise / commit adapters), decoder (the block
loop), stops, chat (prompt rendering with tools), loading (model specs, aliases, device, errors),
engine (the facade the embedded backend and the benchmark use), grammar (tool-call and JSON grammars from
plain tool specs) and constraint (llguidance: masks, run validation, steering). See docs/engine.md.
"""
