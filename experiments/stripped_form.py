"""Source code in the "stripped and tokenized" form of seed 000's data (its D.4: "the datasets in
CODEXGLUE are provided stripped and tokenized"): comments and layout dropped, one space between
code tokens, every string literal `<STR_LIT>` and every number `<NUM_LIT>`.

Per language, the form the paper's data has:
- Python as CodeXGLUE's py150: Python's own tokenizer; a logical line's end is `<EOL>`, blank
  lines, indentation and comments are dropped (a file Python cannot tokenize — Python 2, a
  template — goes through the lexer below, its line ends `<EOL>` too).
- Java as CodeXGLUE's javaCorpus: no line ends at all.
- Go as Java (the paper's Go is CodeSearchNet's code tokens, which carry no line ends either).

py150 keeps some frequent literals (`<STR_LIT:__main__>`); this form does not. The benchmark uses it
to ask whether the paper's cross-language transfer comes from a surface form that every language
shares and the base model never saw (experiments/noesis.py --table stripped)."""

from __future__ import annotations

import io
import re
import tokenize

STR, NUM, EOL = "<STR_LIT>", "<NUM_LIT>", "<EOL>"

# C-family operators, longest first (the rest are single characters)
_OPS = (">>>=", "<<=", ">>=", "...", "&^=", ">>>", "<<", ">>", "&&", "||", "++", "--", "->", "::", "==", "!=",
        "<=", ">=", "+=", "-=", "*=", "/=", "%=", "&=", "|=", "^=", ":=", "<-", "&^", "**", "//", "@")
_PY_OPS = ("**=", "//=", "->", "**", "//", "==", "!=", "<=", ">=", "+=", "-=", "*=", "/=", "%=", "&=", "|=",
           "^=", ">>", "<<", ":=", "@=")


def _lexer(comment: str, strings: str, ops: tuple[str, ...]) -> re.Pattern:
    op = "|".join(re.escape(o) for o in sorted(ops, key=len, reverse=True))
    return re.compile(rf"""(?P<nl>\n)|(?P<ws>[^\S\n]+)|(?P<comment>{comment})|(?P<str>{strings})
        |(?P<num>\.?\d(?:[eEpP][+-]|[\w.])*)|(?P<name>[^\W\d]\w*)|(?P<op>{op}|\S)""", re.X | re.S)


_C_FAMILY = _lexer(r"//[^\n]*|/\*.*?\*/",
                   r'"""(?:\\.|[^\\])*?"""|"(?:\\.|[^"\\\n])*"|`[^`]*`' r"|'(?:\\.|[^'\\\n])+'", _OPS)
_PYTHON_FALLBACK = _lexer(r"\#[^\n]*",
                          r"""[rRbBuUfF]{0,2}(?:'''(?:\\.|[^\\])*?'''|\"\"\"(?:\\.|[^\\])*?\"\"\""""
                          r"""|'(?:\\.|[^'\\\n])*'|"(?:\\.|[^"\\\n])*")""", _PY_OPS)


def stripped(text: str, lang: str) -> str:
    """`text` (one source file of `lang`) in the stripped and tokenized form."""
    if lang == "python":
        try:
            return " ".join(_python_tokens(text))
        except (tokenize.TokenError, SyntaxError):  # IndentationError is a SyntaxError
            return " ".join(_lexed(_PYTHON_FALLBACK, text, line_ends=True))
    if lang in ("java", "go"):
        return " ".join(_lexed(_C_FAMILY, text, line_ends=False))
    raise ValueError(f"no stripped form for language {lang!r}")


def _python_tokens(text: str):
    fstring = (getattr(tokenize, "FSTRING_START", None), getattr(tokenize, "FSTRING_END", None))
    depth, out = 0, []
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if fstring[0] is not None and tok.type == fstring[0]:  # Python ≥ 3.12 splits f-strings up
            depth += 1
        elif depth:
            if tok.type == fstring[1]:
                depth -= 1
                if not depth:
                    out.append(STR)
        elif tok.type == tokenize.STRING:
            out.append(STR)
        elif tok.type == tokenize.NUMBER:
            out.append(NUM)
        elif tok.type == tokenize.NEWLINE:
            out.append(EOL)
        elif tok.type in (tokenize.NAME, tokenize.OP) or (tok.type == tokenize.ERRORTOKEN and tok.string.strip()):
            out.append(tok.string)
    if out and out[-1] == EOL:
        out.pop()
    return out


def _lexed(lexer: re.Pattern, text: str, line_ends: bool):
    out: list[str] = []
    for m in lexer.finditer(text):
        kind = m.lastgroup
        if kind == "nl":
            if line_ends and out and out[-1] != EOL:
                out.append(EOL)
        elif kind == "str":
            out.append(STR)
        elif kind == "num":
            out.append(NUM)
        elif kind in ("name", "op"):
            out.append(m.group())
    if out and out[-1] == EOL:
        out.pop()
    return out
