"""The `cism` command line: convert, generate, chat, info, bench, ppl.

    cism convert SRC -o OUT.cism [--dtype auto|f32|f16|bf16 | --quant RECIPE] [--calibrate auto|TEXT | --no-calibrate]
                 [--tokenizer tok.bin] [--force]
    cism generate -m MODEL.cism -p "Once upon a time" [-n 128] [--temperature 0.8] [--seed 1] [--act int8]
    cism chat -m MODEL.cism
    cism info [-m MODEL.cism]
    cism bench --preset smollm2-135m | -m MODEL.cism [-p 512] [-n 128] [-t THREADS]
    cism bench --preset smollm2-135m --dtype f16,q8,4bit --vs llama.cpp [--threads-list 1,2] [-r 5]
    cism ppl -m MODEL.cism -f TEXT [--ctx N] [--method full|half] [--act auto|outliers|int8|float] [--kld-base BASE.cism]
    cism serve [-m MODEL.cism] [--port 8000] [--slots 4] [--api-key KEY]

Errors are printed as one line on stderr ("cism: error: ...") with exit status 1.
"""
from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import List, Optional

from . import __version__
from .actmodes import ACT_HELP, act_kwargs, act_mode_arg
from .kvtypes import kv_type_arg


def _count(text: str) -> int:
    """An argparse type: an integer >= 0 (the message names the option)."""
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if v < 0:
        raise argparse.ArgumentTypeError(f"{v} is negative: give 0 or more")
    return v


def _help_text(text: str) -> str:
    """argparse %-formats help strings: a literal % must be doubled."""
    return text.replace("%", "%%")


def _add_session_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("-m", "--model", help="a .cism model file (default: SmolLM2-135M-Instruct, "
                   "fetched and converted on first use, see `cism pull`)")
    p.add_argument("-t", "--threads", type=_count, default=0, help="threads (default: the library's choice)")
    p.add_argument("-c", "--ctx", type=_count, default=0, help="context length (default: min(model, 4096))")
    p.add_argument("--kv-type", default="f16", type=kv_type_arg, metavar="{f16,f32,q8,q4a,K/V}",
                   help="KV cache type (default f16; q8, q4a: quantized; K/V such as q8/q4a: K cache q8, "
                        "V cache q4a; docs/KV_CACHE.md)")
    p.add_argument("--act", default="auto", type=act_mode_arg, metavar="{auto,outliers,int8,float}", help=ACT_HELP)


def _add_sampling_args(p: argparse.ArgumentParser, temperature: float, top_k: int = 0, top_p: float = 1.0,
                       min_p: float = 0.0) -> None:
    g = p.add_argument_group("sampling")
    g.add_argument("--temperature", "--temp", type=float, default=temperature,
                   help=f"0 = greedy (default {temperature})")
    g.add_argument("--top-k", type=int, default=top_k, help=f"keep the k most likely tokens (0 = off; default {top_k})")
    g.add_argument("--top-p", type=float, default=top_p, help=f"nucleus sampling mass (1 = off; default {top_p})")
    g.add_argument("--min-p", type=float, default=min_p,
                   help=f"drop tokens below min-p x the best one (0 = off; default {min_p})")
    g.add_argument("--repeat-penalty", type=float, default=1.0, help="penalty for recent tokens (1 = off)")
    g.add_argument("--repeat-last-n", type=int, default=64, help="tokens the penalty looks back over (default 64)")
    g.add_argument("--seed", type=int, default=0, help="random seed (default 0)")


def _sampling(args: argparse.Namespace) -> dict:
    return dict(temperature=args.temperature, top_k=args.top_k, top_p=args.top_p, min_p=args.min_p,
                repeat_penalty=args.repeat_penalty, penalty_last_n=args.repeat_last_n, seed=args.seed)


# ---- convert -------------------------------------------------------------------
def cmd_convert(args: argparse.Namespace) -> int:
    from .convert import convert
    rep = convert(args.src, args.output, dtype=args.dtype, tokenizer=args.tokenizer, overwrite=args.force,
                  progress=None if args.quiet else _progress(), quant=args.quant, layout=args.layout,
                  calibrate=False if args.no_calibrate else args.calibrate, calib_tokens=args.calib_tokens,
                  calib_method=args.calib_method, calib_model=args.calib_model)
    from .model import Model
    with Model(rep.path) as m:  # the C loader checks what was written
        arch = m.architecture
        has_tok = "tokenizer.hf_json" in m.metadata
    print(f"wrote {rep.path}: {arch}, {rep.n_params / 1e6:.2f}M parameters, {rep.bytes_written / 1e6:.1f} MB "
          f"({rep.bits_per_weight():.1f} bits/weight), {rep.seconds:.1f} s"
          + ("" if has_tok else "; no tokenizer (text input needs --tokenizer for llama2.c files)"), file=sys.stderr)
    if rep.quant:
        from .quant import recipe
        counts = {}
        for dt in rep.tensors.values():
            counts[dt] = counts.get(dt, 0) + 1
        print(f"quantization recipe {rep.quant} ({recipe(rep.quant).description}): "
              f"{rep.bits_per_weight():.3f} bits/weight counting every byte of tensor data; tensors: "
              + ", ".join(f"{n} {k}" for k, n in sorted(counts.items())), file=sys.stderr)
        if rep.rounding:
            print(f"  rounding: {rep.rounding}", file=sys.stderr)
        if rep.calibration:
            print(f"  calibrated ({rep.calibration_seconds:.1f} s{rep.calibration_detail}): {rep.calibration}",
                  file=sys.stderr)
        else:
            print("  calibration: none (data-free rounding)", file=sys.stderr)
        for note in rep.notes:
            print("  " + note, file=sys.stderr)
    elif rep.calibration:
        print(f"key offsets and query directions for a quantized KV cache, calibrated ({rep.calibration_seconds:.1f} s"
              f"{rep.calibration_detail}): {rep.calibration}", file=sys.stderr)
    return 0


# ---- upgrade -------------------------------------------------------------------
def cmd_upgrade(args: argparse.Namespace) -> int:
    from .upgrade import upgrade
    n = upgrade(args.src, args.output, overwrite=args.force)
    from .model import Model
    with Model(args.output, verify_checksums=True):  # the C loader checks what was written
        pass
    from .format import VERSION
    print(f"wrote {args.output}: format version {VERSION} (with checksums), {n} interleaved tensors rearranged",
          file=sys.stderr)
    return 0


# ---- verify ----------------------------------------------------------------------
def cmd_verify(args: argparse.Namespace) -> int:
    """Every check the C loader has, the whole data included (docs/FORMAT.md, "Integrity")."""
    from .format import VERSION, CismFile
    from .model import Model
    with Model(args.model, check_weights=True, verify_checksums=True):
        f = CismFile(args.model)
    n, version = len(f.tensors), f.header["version"]
    if version >= 3:
        print(f"{args.model}: OK: format version {version}; header, metadata, tensor directory and the data of all "
              f"{n} tensors match their checksums; every weight is finite")
    else:
        print(f"{args.model}: OK as far as it can be checked: format version {version} has no checksums, so only its "
              f"structure and weight values were checked (a damaged byte of a weight may pass); `cism upgrade` "
              f"rewrites it as version {VERSION}, with checksums")
    return 0


# ---- ppl -----------------------------------------------------------------------
def cmd_ppl(args: argparse.Namespace) -> int:
    from .ppl import kl_divergence, perplexity
    from .cli_io import read_text
    text = read_text(args.file, strict=True)
    act = act_kwargs(args.act)
    if args.kld_base:
        k = kl_divergence(args.model, args.kld_base, text=text, ctx=args.ctx, method=args.method,
                          n_threads=args.threads, max_windows=args.max_windows, **act)
        print(k.describe())
        print(f"KLD {k.kld_mean:.6f}")
        print(f"PPL {k.model.ppl:.4f}")
        print(f"({k.model.seconds:.1f} s)", file=sys.stderr)
        return 0
    r = perplexity(args.model, text=text, ctx=args.ctx, method=args.method, n_threads=args.threads,
                   max_windows=args.max_windows, **act)
    print(r.describe())
    print(f"PPL {r.ppl:.4f}")
    print(f"({r.seconds:.1f} s)", file=sys.stderr)
    return 0


def _progress():
    from .convert import progress_printer
    return progress_printer()


def _model_or_default(args: argparse.Namespace) -> str:
    """-m, or the default real model (downloaded and converted once into the cache)."""
    if args.model:
        return args.model
    from . import pull
    args.model = pull.model_path(log=lambda m: print(f"cism: {m}", file=sys.stderr))
    return args.model


# ---- pull ----------------------------------------------------------------------
def cmd_pull(args: argparse.Namespace) -> int:
    from . import pull
    if args.list:
        for name, src in sorted(pull.MODELS.items()):
            print(f"{name}{' (default)' if name == pull.DEFAULT_MODEL else ''}: {src.description}")
        return 0
    path = pull.model_path(args.name, quant=args.quant, log=None if args.quiet else
                           (lambda m: print(f"cism: {m}", file=sys.stderr)))
    print(path)
    return 0


# ---- generate ------------------------------------------------------------------
def cmd_generate(args: argparse.Namespace) -> int:
    """Streams the continuation to stdout; timings (load, prompt and generation
    tokens/s, stop reason) and prefill progress go to stderr. A prompt that
    does not fit in the context is refused before anything is printed, or cut
    from the left with --truncate-prompt."""
    import time
    from .cli_io import PrefillProgress, read_text, timings
    from .model import Model
    prompt = args.prompt
    if (args.json or args.json_schema) and (args.lookup or args.draft):
        raise ValueError("--json and --json-schema do not combine with --lookup or --draft (their loop runs in C, "
                         "unconstrained)")
    json_request = _json_arg(args)
    if args.file:
        prompt = read_text(args.file)
    if prompt is None:
        prompt = ""
    path = _model_or_default(args)
    t0 = time.perf_counter()
    with Model(path) as model:
        with model.session(n_ctx=args.ctx, n_threads=args.threads, kv_type=args.kv_type, **act_kwargs(args.act)) as s:
            load_seconds = time.perf_counter() - t0
            if args.lookup or args.draft:
                return _generate_speculative(args, model, s, prompt, load_seconds)
            gen = s.generate(prompt, args.n_tokens, ignore_eos=args.ignore_eos, truncate_prompt=args.truncate_prompt,
                             on_prefill=PrefillProgress(), json=json_request, **_sampling(args))
            out = sys.stdout
            if gen.truncated:
                print(f"cism: the prompt was {gen.truncated + len(gen.prompt_tokens)} tokens, more than the context "
                      f"allows: its first {gen.truncated} tokens were dropped (--truncate-prompt)", file=sys.stderr)
            if not args.no_echo:
                out.write(model.tokenizer.decode(gen.prompt_tokens, skip_special=True) if gen.truncated else prompt)
                out.flush()
            for piece in gen:
                out.write(piece)
                out.flush()
            out.write("\n")
            out.flush()
            print(timings(load_seconds, gen), file=sys.stderr)
    return 0


def _generate_speculative(args: argparse.Namespace, model, s, prompt: str, load_seconds: float) -> int:
    """cism generate --lookup / --draft: the loop runs in C (cism_generate_spec);
    text streams as tokens are accepted; acceptance statistics go to stderr."""
    import time
    from .generate import truncate_left
    from .sampler import Sampler
    from .speculative import Speculator
    tok = model.tokenizer
    ids = tok.encode(prompt, add_bos=tok.add_bos)
    truncated = 0
    if len(ids) > s.n_ctx:
        if not args.truncate_prompt:
            from .errors import ContextFullError
            raise ContextFullError(f"the prompt is {len(ids)} tokens but the context has room for {s.n_ctx}: shorten "
                                   "it, use a longer context (-c) or --truncate-prompt")
        ids, truncated = truncate_left(ids, s.n_ctx, args.n_tokens, tok)
    out = sys.stdout
    dec = tok.incremental_decoder(ids)

    def on_token(t: int) -> None:
        out.write(dec.push(t))
        out.flush()

    draft = "lookup" if args.lookup else args.draft
    with Speculator(draft, target=model, draft_max=args.draft_max, ngram_min=args.ngram_min,
                    ngram_max=args.ngram_max, n_threads=args.threads) as spec, Sampler(**_sampling(args)) as smp:
        if not args.no_echo:  # after the drafter and the sampler accepted their settings: an error prints alone
            out.write(tok.decode(ids, skip_special=True) if truncated else prompt)
            out.flush()
        t1 = time.perf_counter()
        s.eval(ids)  # the prompt first, so the decode rate below is decode alone
        for t in ids:
            smp.accept(t)
        prompt_s = time.perf_counter() - t1
        toks = spec.generate_ids(s, [], args.n_tokens, smp, ignore_eos=args.ignore_eos, callback=on_token)
        st = spec.stats
    out.write(dec.flush() + "\n")
    out.flush()
    gen_s = spec.seconds
    print(f"load {load_seconds:.2f} s; prompt {len(ids)} tokens in {prompt_s:.2f} s; generated {len(toks)} tokens in "
          f"{gen_s:.2f} s ({len(toks) / gen_s if gen_s > 0 else 0.0:.1f} tokens/s); stop: {s.stop_reason}",
          file=sys.stderr)
    print(f"speculative ({spec.kind}): {st['steps']} target evals for {st['generated']} tokens "
          f"({st['tokens_per_step']:.2f} per eval); {st['verify_steps']} verified drafts: {st['accepted']}/"
          f"{st['drafted']} accepted ({100 * st['acceptance']:.0f}%)"
          + (f"; {st['draft_evals']} draft-model evals" if spec.kind == "draft" else ""), file=sys.stderr)
    return 0


# ---- chat ------------------------------------------------------------------------
def _chat_renderer(model, args: argparse.Namespace):
    """messages -> prompt text, or None for the plain "User:/Assistant:" REPL.
    --format: a named chat format (C library), "jinja" (the model's own template
    through jinja2), "plain", or "auto": the model's named format, else its Jinja
    template (never dropped: a template that fails to render is an error), else plain."""
    from . import chat_format
    fmt = args.format
    if fmt == "auto":
        fmt = chat_format.model_format(model)
        if fmt is None and "tokenizer.chat_template" in model.metadata:
            fmt = "jinja"
        fmt = fmt or "plain"
    if fmt == "plain":
        return None, fmt
    if fmt == "jinja":
        from .chat import render
        return (lambda msgs: render(model, msgs, True, "jinja")), fmt   # ChatTemplateError when it fails
    return (lambda msgs: chat_format.apply(model, msgs, fmt)), fmt


def _json_arg(args: argparse.Namespace):
    """generate/chat's JSON mode: False, True (--json) or the schema of --json-schema FILE, read and checked
    before the model is loaded."""
    if not args.json_schema:
        return bool(args.json)
    import json
    from .cli_io import read_text
    from .json_schema import read_schema
    try:
        schema = json.loads(read_text(args.json_schema))
    except json.JSONDecodeError as e:
        raise ValueError(f"--json-schema {args.json_schema}: not JSON ({e})") from None
    read_schema(schema)   # SchemaError (a ValueError) names what it cannot follow
    return schema


def cmd_chat(args: argparse.Namespace) -> int:
    """A chat REPL. With a chat format, each turn renders the whole
    conversation, keeps the evaluated tokens that still prefix it and evaluates
    the rest; without one, turns are sent as "User: ...\nAssistant:"."""
    from .model import Model
    from .sampler import Sampler
    interactive = sys.stdin.isatty() and args.prompt is None
    args.json_request = _json_arg(args)
    with Model(_model_or_default(args)) as model:
        tok = model.tokenizer
        render, fmt = _chat_renderer(model, args)
        with model.session(n_ctx=args.ctx, n_threads=args.threads, kv_type=args.kv_type, **act_kwargs(args.act)) as s, \
                Sampler(**_sampling(args)) as sampler:
            if interactive:
                print(f"chatting with {args.model} ({model.architecture}, chat format {fmt}); empty line or Ctrl-D "
                      "ends", file=sys.stderr)
            if render is None:
                return _chat_plain(args, tok, s, sampler, interactive)
            return _chat_formatted(args, tok, s, sampler, render, interactive)


def _next_turn(args: argparse.Namespace, interactive: bool) -> str:
    """The next user turn: -p's message once (then the end), else a line of input."""
    if getattr(args, "prompt", None) is not None:
        turn, args.prompt = args.prompt, ""
        return turn
    return _read_turn(interactive)


def _read_turn(interactive: bool) -> str:
    from .cli_io import read_line
    if interactive:
        sys.stderr.write("> ")
        sys.stderr.flush()
    return read_line()


def _chat_formatted(args, tok, s, sampler, render, interactive: bool) -> int:
    messages = [{"role": "system", "content": args.system}] if args.system else []
    evaluated: list = []   # the prompt tokens the session holds
    while True:
        line = _next_turn(args, interactive)
        if not line or not line.strip():
            break
        messages.append({"role": "user", "content": line.strip()})
        ids = tok.encode(render(messages), add_bos=False)   # the format writes BOS itself
        keep = 0
        while keep < min(len(evaluated), len(ids), s.n_past) and evaluated[keep] == ids[keep]:
            keep += 1
        keep = min(keep, len(ids) - 1)
        if len(ids) + args.n_tokens > s.n_ctx:
            print("[context full: starting over]", file=sys.stderr)
            messages = messages[:1] if args.system else []
            messages.append({"role": "user", "content": line.strip()})
            ids = tok.encode(render(messages), add_bos=False)
            keep = 0
            sampler.reset()
        s.rewind(keep)
        reply = []
        gen = s.generate(ids[keep:], args.n_tokens, sampler=sampler, truncate_prompt=True, json=args.json_request)
        for piece in gen:
            if not reply:
                piece = piece.lstrip()
            reply.append(piece)
            sys.stdout.write(piece)
            sys.stdout.flush()
        if gen.context_full:
            print("\n[context full]", file=sys.stderr)
        sys.stdout.write("\n")
        sys.stdout.flush()
        messages.append({"role": "assistant", "content": "".join(reply).strip()})
        evaluated = ids
    return 0


def _chat_plain(args, tok, s, sampler, interactive: bool) -> int:
    first = True
    while True:
        line = _next_turn(args, interactive)
        if not line or not line.strip():
            break
        turn = ("" if first else "\n") + f"User: {line.strip()}\nAssistant:"
        if first and args.system:
            turn = args.system.strip() + "\n" + turn
        ids = tok.encode(turn, add_bos=tok.add_bos and s.n_past == 0)
        if s.n_past + len(ids) + 8 > s.n_ctx:
            print("[context full: starting over]", file=sys.stderr)
            s.reset()
            sampler.reset()
            ids = tok.encode(turn.lstrip("\n"), add_bos=tok.add_bos)
        first = False
        gen = s.generate(ids, args.n_tokens, sampler=sampler, stop=["\nUser:"], truncate_prompt=True,
                         json=args.json_request)
        started = False
        for piece in gen:
            if not started:  # the reply follows "Assistant:" with a space
                piece = piece.lstrip()
                started = bool(piece)
            sys.stdout.write(piece)
            sys.stdout.flush()
        if gen.context_full:
            print("\n[context full: starting over]", file=sys.stderr)
            s.reset()
            sampler.reset()
            first = True
        sys.stdout.write("\n")
        sys.stdout.flush()
    return 0


# ---- serve -----------------------------------------------------------------------
def cmd_serve(args: argparse.Namespace) -> int:
    """An OpenAI-compatible HTTP server (the `server` extra: FastAPI + Uvicorn; docs/SERVER.md)."""
    from .server import require, serve
    require()   # before the model is fetched: a missing extra is said at once
    api_key = args.api_key if args.api_key is not None else os.environ.get("CISM_API_KEY") or None
    serve(_model_or_default(args), host=args.host, port=args.port, n_slots=args.slots, n_ctx=args.ctx,
          n_threads=args.threads, kv_type=args.kv_type, api_key=api_key, max_queue=args.max_queue,
          max_tokens=args.max_tokens, max_body_bytes=args.max_body_bytes, prefill_chunk=args.prefill_chunk,
          model_id=args.model_name, lookup=args.lookup, draft_max=args.draft_max, act=args.act)
    return 0


# ---- info ------------------------------------------------------------------------
def cmd_info(args: argparse.Namespace) -> int:
    from . import build_info, library_version, system_info
    print(f"cism {__version__} (libcism {library_version()})")
    print(f"system: {system_info()}")
    print(f"build:  {build_info()}")
    if args.model:
        from .model import Model
        with Model(args.model) as m:
            print(f"\nmodel: {args.model}")
            for k, v in m.hparams().items():
                print(f"  {k:<16} {v}")
            print("metadata:")
            for k, v in m.metadata.summary().items():
                print(f"  {k:<40} {v}")
    return 0


# ---- bench -----------------------------------------------------------------------
def cmd_bench(args: argparse.Namespace) -> int:
    from .bench import run
    return run(args)


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS,
                        help="show the library's log messages and statistics")
    p = argparse.ArgumentParser(prog="cism", description="Run small language models on the CPU with libcism.",
                                parents=[common])
    p.add_argument("--version", action="version", version=f"cism {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    c = sub.add_parser("convert", parents=[common], help="convert a Hugging Face folder, a GGUF file or a llama2.c .bin to .cism")
    c.add_argument("src", help="a Hugging Face model folder (config.json + *.safetensors), a GGUF file (llama.cpp) "
                        "or a llama2.c .bin file")
    c.add_argument("-o", "--output", required=True, help="the .cism file to write (never overwritten without --force)")
    c.add_argument("--dtype", default="auto", choices=["auto", "f32", "f16", "bf16"],
                   help="weight type (default auto: the checkpoint's own; f32 for llama2.c)")
    from .quant import RECIPES
    c.add_argument("--quant", choices=list(RECIPES), metavar="RECIPE",
                   help=_help_text("quantize the weight matrices: "
                                   + "; ".join(f"{r.name}: {r.description}" for r in RECIPES.values())))
    c.add_argument("--layout", default="auto", choices=["auto", "rows"],
                   help="with --quant: auto (default) stores q8/q4s matrices 16 rows interleaved where the shape allows "
                        "(same values, faster kernels); rows keeps them row by row")
    cal = c.add_mutually_exclusive_group()
    cal.add_argument("--calibrate", metavar="auto|TEXT",
                     help="with --quant: round the 3- to 6-bit matrices with the statistics of their inputs on "
                          "calibration tokens (auto: text the model samples itself from BOS; or a UTF-8 text file). "
                          "Default: auto for the recipes "
                          + ", ".join(r.name for r in RECIPES.values() if r.calibrate_by_default)
                          + ", none for the others. "
                          "Every calibrated file also "
                          "stores each attention layer's mean key and queries' main direction, which a q8/q4a "
                          "KV cache uses (docs/KV_CACHE.md); without --quant that is all it does")
    cal.add_argument("--no-calibrate", action="store_true",
                     help="with --quant: data-free rounding (no calibration pass), also for the recipes calibrated by default")
    c.add_argument("--calib-tokens", type=int, default=0, metavar="N",
                   help="calibration tokens (default 4096)")
    c.add_argument("--calib-method", choices=["gptq", "imatrix"], default=None,
                   help="calibrated rounding: gptq (default; errors compensated from the inputs' Gram blocks) or "
                        "imatrix (scale search weighted by each input column's mean square)")
    c.add_argument("--calib-model", choices=["q8", "f32"], default=None,
                   help="the copy of the model the calibration text is sampled from and the statistics taken on: "
                        "q8 (default, faster) or f32 (unquantized)")
    c.add_argument("--tokenizer", help="llama2.c tokenizer.bin to embed (llama2.c checkpoints only)")
    c.add_argument("--force", action="store_true", help="replace an existing output file")
    c.add_argument("-q", "--quiet", action="store_true", help="no progress output")
    c.set_defaults(func=cmd_convert)

    u = sub.add_parser("upgrade", parents=[common], help="rewrite a .cism file of an older format version as the current one")
    u.add_argument("src", help="the .cism file to read (left as it is)")
    u.add_argument("-o", "--output", required=True, help="the .cism file to write (never overwritten without --force)")
    u.add_argument("--force", action="store_true", help="replace an existing output file")
    u.set_defaults(func=cmd_upgrade)

    vf = sub.add_parser("verify", parents=[common],
                        help="check a .cism file completely: structure, checksums of header and data, weight values")
    vf.add_argument("model", help="the .cism file")
    vf.set_defaults(func=cmd_verify)

    g = sub.add_parser("generate", parents=[common], help="continue a prompt, streaming the text to stdout")
    _add_session_args(g)
    g.add_argument("-p", "--prompt", help="the prompt text (default: empty, i.e. just BOS)")
    g.add_argument("-f", "--file", help="read the prompt from this file (- = standard input)")
    g.add_argument("-n", "--n-tokens", type=_count, default=128, help="tokens to generate at most (default 128)")
    g.add_argument("--truncate-prompt", action="store_true",
                   help="cut a prompt longer than the context from the left (keeping BOS) instead of refusing it")
    g.add_argument("--ignore-eos", action="store_true", help="do not stop at end-of-sequence tokens")
    g.add_argument("--no-echo", action="store_true", help="print only the generated text, not the prompt")
    g.add_argument("--json", action="store_true", help="the output is one JSON object (sampling masks what cannot "
                   "continue it; ask for JSON in the prompt too)")
    g.add_argument("--json-schema", metavar="FILE", help="the output is one JSON object this JSON schema accepts "
                   "(a file; the keywords followed: docs/SERVER.md)")
    sp = g.add_argument_group("speculative decoding (exact: greedy output is unchanged; docs/SPECULATIVE.md)")
    spx = sp.add_mutually_exclusive_group()
    spx.add_argument("--lookup", action="store_true", help="draft by prompt lookup (n-grams of the prompt and output)")
    spx.add_argument("--draft", "--draft-model", metavar="MODEL",
                     help="draft with this smaller or quantized .cism model of the same vocabulary")
    sp.add_argument("--draft-max", type=_count, default=None, help="most tokens drafted per step (default 8 lookup, 4 draft)")
    sp.add_argument("--ngram-min", type=_count, default=None, help="shortest n-gram prompt lookup matches (default 2)")
    sp.add_argument("--ngram-max", type=_count, default=None, help="longest n-gram prompt lookup matches (default 4)")
    _add_sampling_args(g, temperature=0.0)
    g.set_defaults(func=cmd_generate)

    ch = sub.add_parser("chat", parents=[common], help="interactive chat in the model's chat format")
    _add_session_args(ch)
    ch.add_argument("-p", "--prompt", help="answer this one message and exit (no interactive session)")
    ch.add_argument("-n", "--n-tokens", type=_count, default=256, help="tokens per reply at most (default 256)")
    ch.add_argument("--system", help="the system message (plain format: text put before the first turn)")
    ch.add_argument("--format", default="auto",
                    choices=["auto", "chatml", "llama3", "llama2", "mistral", "zephyr", "jinja", "plain"],
                    help="chat format (default auto: the model's own, else its Jinja template, "
                         "else plain 'User:/Assistant:' turns)")
    ch.add_argument("--json", action="store_true", help="each reply is one JSON object")
    ch.add_argument("--json-schema", metavar="FILE", help="each reply is one JSON object this JSON schema accepts")
    _add_sampling_args(ch, temperature=0.7, top_k=40, top_p=0.95, min_p=0.05)  # llama.cpp's defaults
    ch.set_defaults(func=cmd_chat)

    pl = sub.add_parser("pull", parents=[common], help="download a real model (pinned, checked) and convert it once "
                        "into the cache; prints the .cism path")
    from .pull import DEFAULT_MODEL, MODELS
    pl.add_argument("name", nargs="?", default=DEFAULT_MODEL, choices=sorted(MODELS),
                    help=f"the model (default {DEFAULT_MODEL})")
    pl.add_argument("--quant", choices=list(RECIPES), metavar="RECIPE",
                    help="requantize with a cism recipe (default: keep the file's own types, lossless)")
    pl.add_argument("--list", action="store_true", help="list the known models")
    pl.add_argument("-q", "--quiet", action="store_true", help="no progress output")
    pl.set_defaults(func=cmd_pull)

    sv = sub.add_parser("serve", parents=[common], help="an OpenAI-compatible HTTP server (needs the server extra: "
                        "pip install './bindings_py[server]')")
    _add_session_args(sv)
    sv.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine only)")
    sv.add_argument("--port", type=_count, default=8000, help="TCP port (default 8000; 0 = a free one, printed)")
    sv.add_argument("--slots", type=_count, default=4, help="requests served at once, one session each (default 4)")
    sv.add_argument("--max-queue", type=_count, default=64,
                    help="requests that may wait for a slot; past that: 429 with Retry-After (default 64)")
    sv.add_argument("--max-tokens", type=_count, default=4096, help="the most tokens one request may ask for "
                    "(default 4096)")
    sv.add_argument("--max-body-bytes", type=_count, default=1 << 20, help="request body size limit (default 1 MiB)")
    sv.add_argument("--prefill-chunk", type=_count, default=64,
                    help="prompt tokens evaluated per step while other requests generate (default 64)")
    sv.add_argument("--lookup", action="store_true",
                    help="speculative decoding by prompt lookup: drafts from the request's own text, verified in "
                         "the batched step (same tokens for greedy requests; docs/SERVER.md)")
    sv.add_argument("--draft-max", type=_count, default=7, help="with --lookup: the most drafts per step (default 7)")
    sv.add_argument("--api-key", help="require 'Authorization: Bearer KEY' on /v1 and /metrics (default: the "
                    "environment variable CISM_API_KEY; none = open)")
    sv.add_argument("--model-name", help="the model id in responses and /v1/models (default: the file name)")
    sv.set_defaults(func=cmd_serve)

    i = sub.add_parser("info", parents=[common], help="library, CPU and (with -m) model information")
    i.add_argument("-m", "--model", help="a .cism model file")
    i.set_defaults(func=cmd_info)

    b = sub.add_parser("bench", parents=[common], help="prefill and decode speed (tokens/s)")
    from .bench import add_arguments
    add_arguments(b)
    b.set_defaults(func=cmd_bench)

    from .ppl import METHODS
    pp = sub.add_parser("ppl", parents=[common], help="perplexity of a model on a text file (teacher-forced NLL)")
    pp.add_argument("-m", "--model", required=True, help="a .cism model file")
    pp.add_argument("-f", "--file", required=True, help="a UTF-8 text file (- = standard input)")
    pp.add_argument("--ctx", type=int, default=0, help="window length in tokens (default: the model's context length)")
    pp.add_argument("--method", choices=sorted(METHODS), default="full",
                    help="; ".join(f"{k}: {v}" for k, v in METHODS.items()))
    pp.add_argument("-t", "--threads", type=int, default=0, help="threads (default: the library's choice)")
    aq = pp.add_mutually_exclusive_group()
    aq.add_argument("--act", default="auto", type=act_mode_arg, metavar="{auto,outliers,int8,float}", help=ACT_HELP)
    aq.add_argument("--act-quant", dest="act", action="store_const", const="outliers",
                    help="the same as --act outliers (int8 activations with integer dot products, the default)")
    aq.add_argument("--float-act", dest="act", action="store_const", const="float",
                    help="the same as --act float (float activations: each weight block decoded to f32)")
    pp.add_argument("--max-windows", type=int, default=0, help="stop after this many windows (0 = the whole text)")
    pp.add_argument("--kld-base", metavar="BASE.cism",
                    help="also report KLD(base || model) of the next-token distributions against this base model "
                         "(same tokenizer; e.g. the f32 model when -m is a quantized one): mean with its standard "
                         "error, median, 90th/99th percentile, max, same-top-token share, and both PPLs")
    pp.set_defaults(func=cmd_ppl)
    return p


def main(argv: Optional[List[str]] = None) -> int:
    try:
        parser = build_parser()  # its option lists read the library (kernel tiers, dtypes)
    except OSError as e:  # the shared library cannot be loaded: say where it was looked for and what to do
        print(f"cism: error: {e}", file=sys.stderr)
        return 1
    args = parser.parse_args(argv)
    args.verbose = getattr(args, "verbose", False)
    # the library's warnings (old format version, a bad CISM_ISA, ...) always reach stderr; -v adds the rest
    level = logging.INFO if args.verbose else logging.WARNING
    from .cli_io import log_to_stderr
    log_to_stderr(level)
    from .log import set_log_level
    set_log_level(level)
    try:
        return args.func(args)
    except KeyboardInterrupt:
        print("\ncism: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # the reader went away (e.g. `| head`): stop quietly
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1
    except ImportError as e:
        from .llamacpp import MissingExtra
        if isinstance(e, MissingExtra):  # an optional extra is not installed: say which and how
            print(f"cism: error: {e}", file=sys.stderr)
            return 1
        raise
    except (OSError, ValueError, RuntimeError, MemoryError) as e:
        # CismError subclasses, ConversionError, FileExistsError, TokenizerError, ...
        print(f"cism: error: {e}", file=sys.stderr)
        return 1
    except Exception as e:
        from .errors import CismError
        if isinstance(e, CismError):
            print(f"cism: error: {e}", file=sys.stderr)
            return 1
        raise


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
