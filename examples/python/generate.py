"""Stream a continuation of a prompt with the cism Python package.

    python examples/python/generate.py model.cism "Once upon a time" [n_tokens]

Make model.cism with `cism convert` (see README.md).
"""
import sys

import cism


def main() -> None:
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    path, prompt = sys.argv[1], sys.argv[2]
    n_tokens = int(sys.argv[3]) if len(sys.argv) > 3 else 64

    with cism.Model(path) as model:
        print(f"[{model.architecture}, {model.n_params / 1e6:.1f}M parameters]", file=sys.stderr)
        # one session = one conversation (KV cache); it can be continued
        with model.session(n_ctx=512) as session:
            print(prompt, end="", flush=True)
            gen = session.generate(prompt, n_tokens, temperature=0.8, top_p=0.95, seed=1)
            for piece in gen:           # text arrives as it is generated
                print(piece, end="", flush=True)
            print()
            print(f"[{len(gen.tokens)} tokens, stopped by {gen.stop_reason}]", file=sys.stderr)

            # the same session, driven by hand: logits as a numpy array
            session.eval(model.tokenizer.encode(" The end.", add_bos=False))
            logits = session.logits()
            best = int(logits.argmax())
            print(f"most likely next token: {model.tokenizer.decode([best])!r}", file=sys.stderr)


if __name__ == "__main__":
    main()
