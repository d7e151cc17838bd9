"""The demo model's GGUF in the Hugging Face layout (safetensors, config,
tokenizer, chat template) that vLLM loads: transformers reads the GGUF and
dequantizes it; the weights are then saved as a plain model.
Usage: vllm-model.py MODEL.gguf OUT_DIR"""

from __future__ import annotations

import sys
from pathlib import Path

from transformers import AutoModelForCausalLM, AutoTokenizer


def main() -> None:
    gguf, out = Path(sys.argv[1]), Path(sys.argv[2])
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    loaded = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name)
    # Loaded from a GGUF, the model says it is quantized and refuses to be
    # saved; its weights are plain floats by now, so a plain model takes them.
    config = loaded.config
    if hasattr(config, "quantization_config"):
        delattr(config, "quantization_config")
    model = AutoModelForCausalLM.from_config(config)
    model.load_state_dict(loaded.state_dict())
    tokenizer.save_pretrained(out)
    model.save_pretrained(out)


if __name__ == "__main__":
    main()
