"""`umbra train card`: the model card (README.md) of an exported model, rendered only from files
that sit in the repo — the model's `config.json`, its `training.json` (written by the export),
its `eval.json` (written by `umbra eval lm --json`) and the corpus summary
`data/manifest/summary.json` — so anyone can regenerate it and every figure has a source."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from umbra.errors import ConfigError
from umbra.model.parts import SplitPlan
from umbra.training.export import CURVES_NAME, PROVENANCE_NAME

EVAL_NAME = "eval.json"
LANG_NAMES = {"python": "Python", "go": "Go", "java": "Java"}


EVAL_FILES = (EVAL_NAME, "eval-heldout.json")  # each from `umbra eval lm --json`, shown when present


@dataclass(frozen=True)
class CardInputs:
    model_dir: Path  # exported model: config.json, training.json, eval.json (eval-heldout.json optional)
    summary: Path = Path("data/manifest/summary.json")  # corpus statistics
    name: str | None = None  # the card's title; None: the model directory's name


def _read_json(path: Path, hint: str) -> dict:
    if not path.exists():
        raise ConfigError(f"{path} is missing: {hint}")
    return json.loads(path.read_text(encoding="utf-8"))


def _param_count(cfg: dict) -> int:
    """Parameters of a Llama config (tied head counted once)."""
    h, i, n, v = cfg["hidden_size"], cfg["intermediate_size"], cfg["num_hidden_layers"], cfg["vocab_size"]
    head_dim = cfg.get("head_dim") or h // cfg["num_attention_heads"]
    attn = h * head_dim * (2 * cfg["num_attention_heads"] + 2 * cfg["num_key_value_heads"])
    block = attn + 3 * h * i + 2 * h
    return n * block + v * h * (1 if cfg.get("tie_word_embeddings") else 2) + h


def _precision(tc: dict) -> str:
    """The run's numeric precision, including a bf16 run continued in fp32 (`--fp32` on resume)."""
    until = tc.get("bf16_until_step")
    if until is not None:
        return f"bfloat16 autocast up to step {until:,}, fp32 after it (a CPU without native bf16 matmul)"
    return "bfloat16 autocast" if tc["bf16"] else "fp32"


def _schedule(tc: dict, prov: dict) -> str:
    """The learning-rate schedule, including budget changes made on resume (`--total-tokens`)."""
    text = (f"peak lr {tc['lr']:g} with {tc['warmup_steps']} warmup steps and cosine decay to "
            f"{tc['lr'] * tc['min_lr_ratio']:g}")
    for c in prov.get("schedule_changes", []):
        text += (f" (the budget, and with it the cosine's end, changed from {c['old_total_tokens']:,} "
                 f"to {c['new_total_tokens']:,} tokens when resuming at step {c['step']:,})")
    return text


def _data_section(summary: dict) -> list[str]:
    out = ["| source | language | license | files | bytes |", "|---|---|---|---:|---:|"]
    for name, s in sorted(summary["sources"].items(), key=lambda kv: (kv[1]["lang"], kv[0])):
        out.append(f"| {name} | {LANG_NAMES.get(s['lang'], s['lang'])} | {s['license']} | {s['files']:,} "
                   f"| {s['bytes'] / 1e6:.2f} MB |")
    tokens = summary.get("tokens")
    if tokens:
        out += ["", "Tokens (shipped tokenizer, no FIM sentinels) per split:", "",
                "| language | train | valid | test | reserved (never trained on) |", "|---|---:|---:|---:|---:|"]
        for lang, t in tokens.items():
            out.append(f"| {LANG_NAMES.get(lang, lang)} | {t['train'] / 1e6:.2f} M | {t['valid'] / 1e6:.2f} M "
                       f"| {t['test'] / 1e6:.2f} M | {t['reserved'] / 1e6:.2f} M |")
    return out


def _eval_section(ev: dict) -> list[str]:
    out = ["| language | tokens | next-token top-1 | perplexity | FIM lines | FIM line exact match |",
           "|---|---:|---:|---:|---:|---:|"]
    for r in ev["languages"]:
        out.append(f"| {LANG_NAMES.get(r['lang'], r['lang'])} | {r['tokens']:,} | {r['top1']:.1%} "
                   f"| {r['perplexity']:.2f} | {r['fim_cases']} | {r['fim_exact_match']:.1%} |")
    return out


def _origin(prov: dict, cfg: dict) -> str:
    """Where the weights began: up-scaled from a trained model (deep.py), or random."""
    init = prov.get("init") or {}
    if init.get("init") != "upscaled":
        return "Trained from random weights."
    base = Path(init["base_model"]).name
    return (f"It began as `{base}`: each of that model's trained blocks stacked twice in a row (function-preserving "
            "depth up-scaling, `umbra/training/upscale.py`: each copy's attention output and MLP down projections "
            f"start at zero, so at step 0 the model computes exactly what `{base}` does), then pretraining continued "
            "on longer blocks with repository-level sequences (below).")


def _split(cfg: dict) -> str:
    n = cfg["num_hidden_layers"]
    plan = SplitPlan.default(n)
    held = plan.encoder_blocks + plan.decoder_blocks
    return (f"Umbra's default split: E={plan.encoder_blocks} client block(s), {n - held} middle blocks in the cloud, "
            f"D={plan.decoder_blocks} client block(s) — the client holds {held} of {n} blocks ({held / n:.1%}).")


def _tokenizer(d: Path, cfg: dict) -> str:
    tok = _read_json(d / "tokenizer.json", "export the model with its tokenizer")
    specials = "; specials " + ", ".join(f"`{t['content']}`={t['id']}" for t in tok.get("added_tokens", []))
    return (f"Byte-level BPE (`tokenizers`), {len(tok['model']['vocab']):,} tokens learned on the training split"
            f"{specials}; embedding rows {cfg['vocab_size']:,}; `decode(encode(x)) == x` byte-exactly.")


def _repo_line(tc: dict) -> list[str]:
    repo = tc.get("repo") or {}
    if not repo.get("rate"):
        return []
    return [f"- repository-level sequences: {repo['rate']:.0%} of the eligible files are grouped, "
            f"{repo['min_files']}–{repo['max_files']} files of one package directory per unit (at most "
            f"{repo['max_unit_chars']:,} characters), each file after `{repo['file_sep']}` and its path header — the "
            "layout the language server's open-file context uses"]


def _evaluations(d: Path, ev: dict) -> list[str]:
    out = []
    for name in EVAL_FILES:
        path = d / name
        if not path.exists():
            continue
        e = json.loads(path.read_text(encoding="utf-8")) if name != EVAL_NAME else ev
        es = e.get("settings", {})
        split = es.get("split", "test")
        what = ("held-out third-party code no model here trained on (`umbra data heldout`)" if split == "heldout"
                else f"the corpus's {split} split")
        out += [f"`umbra eval lm` on {what} ({e['seconds']:.0f} s): next-token top-1 accuracy and perplexity over "
                f"up to {es.get('max_tokens_per_lang', 0):,} tokens of the files per language, and FIM line exact "
                "match (one whole non-blank line hidden, completed greedily from prefix and suffix, compared after "
                f"stripping whitespace; {es.get('fim_lines', '?')} cases per language sampled with seed "
                f"{es.get('seed', '?')}).", "", *_eval_section(e), ""]
    return out


def _reproduce(prov: dict, name: str) -> list[str]:
    out = f"models/{name}"
    if (prov.get("init") or {}).get("init") == "upscaled":
        run = "runs/pretrain-deep"
        steps = [f"scripts/pretrain-deep start        # {run}; `resume` after an interruption",
                 f"umbra train export --checkpoint {run}/last.pt --tokenizer {run}/tokenizer --out {out}"]
    else:
        steps = ["umbra train pretrain            # --resume after an interruption; checkpoints every 15 min",
                 f"umbra train export --checkpoint runs/pretrain/last.pt --out {out}"]
    return ["```sh", "umbra data build && umbra data tokenizer && umbra data stats && umbra data heldout", *steps,
            f"umbra eval lm --model {out} --json {out}/{EVAL_NAME}",
            f"umbra eval lm --model {out} --corpus data --split heldout --max-tokens 100000 --fim-lines 100 "
            f"--json {out}/{EVAL_FILES[1]}",
            f"umbra train card --model {out}   # this file", "```", ""]


def render_card(inputs: CardInputs) -> str:
    d = inputs.model_dir
    name = inputs.name or d.name
    cfg = _read_json(d / "config.json", "export the model first (`umbra train export`)")
    prov = _read_json(d / PROVENANCE_NAME, "export the model with `umbra train export` (it writes training.json)")
    ev = _read_json(d / EVAL_NAME, f"run `umbra eval lm --model {d} --json {d / EVAL_NAME}`")
    summary = _read_json(inputs.summary, "run `umbra data build` and `umbra data stats`")
    st, tc, hw = prov["state"], prov["config"], prov["hardware"]
    total_tokens = prov["total_steps"] * tc["batch_size"] * tc["model"]["context_length"]
    status = ("Final: the whole pretraining schedule ran." if prov["finished"] else
              f"**Interim**: pretraining step {st['step']:,} of {prov['total_steps']:,} "
              f"({st['tokens_seen'] / 1e6:.1f} M of {total_tokens / 1e6:.1f} M tokens); pretraining continues "
              f"and these weights and figures will be replaced.")
    m = tc["model"]
    params = _param_count(cfg) / 1e6
    rope = cfg["rope_parameters"]["rope_theta"] if "rope_parameters" in cfg else cfg.get("rope_theta")
    lines = [
        f"# {name}", "",
        "A small Llama-architecture causal code LM trained by the project itself, on this kind of machine, from "
        "code that Debian and PyPI ship as source, for Umbra's split path: a fresh machine with no model "
        "downloads gets real completions; any local Hugging Face Llama / Qwen2 / Mistral directory can replace it "
        f"(`--model`). {_origin(prov, cfg)}", "",
        f"Status — {status}", "",
        "## Model", "",
        f"`LlamaForCausalLM`, {params:.2f} M parameters: hidden {cfg['hidden_size']}, "
        f"{cfg['num_hidden_layers']} layers, {cfg['num_attention_heads']} heads / {cfg['num_key_value_heads']} KV "
        f"heads, SwiGLU {cfg['intermediate_size']}, vocabulary {cfg['vocab_size']:,}, context "
        f"{cfg['max_position_embeddings']}, RoPE θ {rope}, tied embeddings. {_split(cfg)}", "",
        "Files: `model.safetensors` (fp32), `config.json`, `generation_config.json`, the tokenizer "
        "(`tokenizer.json`, `tokenizer_config.json`, `special_tokens_map.json`), `training.json` "
        f"(provenance), the evaluation files below, `{CURVES_NAME}`.", "",
        "## Intended use and limits", "",
        "Line and block completion of Python, Go and Java with fill-in-the-middle, as Umbra's default and as "
        f"the base model of its privacy experiments. It is small ({params:.0f} M parameters): expect short, local "
        "completions (closing a call, finishing an expression, a common idiom), not program synthesis. It has "
        "seen no other languages and no natural-language instruction data.", "",
        "## Data", "",
        "Built by `umbra data build` (details and filter statistics in `docs/data.md`): CPython's standard "
        "library and pinned PyPI sdists (Python), Go's standard library from Debian `golang-src`, the JDK "
        "class library from Debian `openjdk-17-source`; filtered (generated, minified), deduplicated "
        "(exact and whitespace-normalized), split by file; never the held-out packages (`umbra data heldout`; "
        "the trainer refuses a corpus that overlaps them). The JDK sources are GPL-2.0 with the Classpath "
        "exception and are used only as training data.", "",
        *_data_section(summary), "",
        "## Tokenizer", "", _tokenizer(d, cfg), "",
        "## Training", "",
        f"FIM rate {tc['fim']['rate']} (PSM/SPM {1 - tc['fim']['spm_rate']:.1f}/"
        f"{tc['fim']['spm_rate']:.1f}, character-level split points), {tc['batch_size']} × {m['context_length']}-token "
        f"blocks per step, AdamW (β {tc['beta1']}/{tc['beta2']}, weight decay {tc['weight_decay']}), "
        f"{_schedule(tc, prov)}, "
        f"gradient clipping {tc['grad_clip']}, {_precision(tc)}, seed {tc['seed']}.", "",
        f"- tokens seen: {st['tokens_seen']:,} ({st['step']:,} steps; schedule: {prov['total_steps']:,} steps, "
        f"{total_tokens:,} tokens)",
        *_repo_line(tc),
        f"- training wall time: {st['elapsed_s'] / 3600:.2f} h, summed over resumed runs",
        f"- hardware: {hw['cpu']} (the export's machine; the run was resumed over several sessions on "
        f"2-vCPU cloud VMs), {hw['logical_cpus']} logical CPUs, {hw['torch_threads']} torch threads, no GPU",
        "", f"![loss curves]({CURVES_NAME})" if (d / CURVES_NAME).exists() else "", "",
        "## Evaluation", "",
        *_evaluations(d, ev),
        "## Reproduce", "",
        *_reproduce(prov, name),
    ]
    return "\n".join(lines)


def write_card(inputs: CardInputs) -> Path:
    out = inputs.model_dir / "README.md"
    out.write_text(render_card(inputs), encoding="utf-8")
    return out
