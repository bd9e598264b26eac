"""Write the local assets torchtitan's llama3 configs read, so it runs offline: `python torchtitan_assets.py DIR`.

torchtitan wheels ship no tokenizer and no test dataset, but their defaults (0.2.2: `--model.name llama3
--model.flavor debugmodel`; 0.3.0: `--module llama3 --config llama3_debugmodel`) read
`./tests/assets/tokenizer` (tokenizer.json + tokenizer_config.json) and the dataset `c4_test`
(`load_dataset("tests/assets/c4_test")`), both relative to the working directory. This writes:
  DIR/tests/assets/tokenizer/   a byte-level BPE (vocab 2000 < the debug model's 2048) with
                                <|begin_of_text|> / <|end_of_text|>, trained here with `tokenizers`;
  DIR/tests/assets/c4_test/     JSON lines {"text": ...} made from the Python standard library's
                                docstrings (real English-ish text, nothing downloaded).
Run torchtitan from DIR afterwards. For the 8B config pass
`--hf_assets_path ./tests/assets/tokenizer --dataloader.dataset c4_test` (see the notes).
"""

from __future__ import annotations

import json
import pkgutil
import sys
from importlib import import_module
from pathlib import Path

SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>"]


def stdlib_texts(limit: int = 2000) -> list[str]:
    """Docstrings of stdlib modules and their public members, longest first-come."""
    texts: list[str] = []
    for info in pkgutil.iter_modules():
        if info.name.startswith("_") or info.name in ("antigravity", "this", "idlelib", "turtledemo"):
            continue
        try:
            mod = import_module(info.name)
        except Exception:  # noqa: BLE001 - optional/platform modules simply don't contribute
            continue
        for obj in [mod, *(getattr(mod, n, None) for n in dir(mod) if not n.startswith("_"))]:
            doc = getattr(obj, "__doc__", None)
            if isinstance(doc, str) and len(doc) > 200 and doc not in texts:
                texts.append(doc)
                if len(texts) >= limit:
                    return texts
    return texts


def write_tokenizer(out: Path, texts: list[str], vocab: int = 2000) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=vocab, special_tokens=SPECIALS,
                                                       initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    out.mkdir(parents=True, exist_ok=True)
    tok.save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(json.dumps({
        "bos_token": SPECIALS[0], "eos_token": SPECIALS[1], "add_bos_token": True, "add_eos_token": False,
        "model_max_length": 131072, "tokenizer_class": "PreTrainedTokenizerFast"}, indent=1))


def write_dataset(out: Path, texts: list[str]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / "data.json.tmp"
    with tmp.open("w") as f:
        for t in texts:
            f.write(json.dumps({"text": t}) + "\n")
    tmp.replace(out / "data.json")


def main(root: str = ".") -> None:
    assets = Path(root) / "tests" / "assets"
    texts = stdlib_texts()
    write_tokenizer(assets / "tokenizer", texts)
    write_dataset(assets / "c4_test", texts)
    print(f"wrote {len(texts)} texts and a tokenizer under {assets}")


if __name__ == "__main__":
    main(*sys.argv[1:2])
