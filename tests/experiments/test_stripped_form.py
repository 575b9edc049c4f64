"""experiments/stripped_form.py: source files in the stripped and tokenized form of seed 000's data —
comments and layout gone, literals normalized, one space between code tokens; Python's logical line
ends kept as <EOL>, Java's and Go's not."""

from __future__ import annotations

import pytest

from experiments.stripped_form import stripped


def test_python_is_py150s_form():
    src = ('import os  # a comment\n"""Docstring\nover lines."""\n\n\nif os.sep:\n    x = call(1,\n'
           '             0x1F, 2.5e-3)\n    y = f"{x}!" + b\'raw\'\n')
    assert stripped(src, "python") == ("import os <EOL> <STR_LIT> <EOL> if os . sep : <EOL> "
                                       "x = call ( <NUM_LIT> , <NUM_LIT> , <NUM_LIT> ) <EOL> "
                                       "y = <STR_LIT> + <STR_LIT>")


def test_python_that_python_cannot_tokenize_goes_through_the_lexer_with_its_line_ends():
    src = 'print "hi"  # python 2\n  x = 1\n\n'  # an unexpected indent: no Python tokenizer takes it
    assert stripped(src, "python") == "print <STR_LIT> <EOL> x = <NUM_LIT>"


def test_java_is_javacorpus_form_without_line_ends():
    src = ('/* header\n * licence */\npackage a.b;\n// note\nclass C {\n  char q = \'\\\'\';\n'
           '  String s = "a \\"quoted\\" // not a comment";\n  String t = """\n    block\n    """;\n'
           '  void f() { x >>>= 2; List<List<String>> l; }\n}\n')
    assert stripped(src, "java") == ("package a . b ; class C { char q = <STR_LIT> ; String s = <STR_LIT> ; "
                                     "String t = <STR_LIT> ; void f ( ) { x >>>= <NUM_LIT> ; "
                                     "List < List < String >> l ; } }")


def test_go_is_javas_form_with_its_raw_strings_runes_and_operators():
    src = "package p\n\n// doc\nfunc f(ch chan int) {\n\ts := `raw\nline` + \"x\"\n\tif v := <-ch; v &^ 'a' != 1.5e+3 {\n\t}\n}\n"
    assert stripped(src, "go") == ("package p func f ( ch chan int ) { s := <STR_LIT> + <STR_LIT> "
                                   "if v := <- ch ; v &^ <STR_LIT> != <NUM_LIT> { } }")


def test_a_file_of_comments_only_has_nothing_left():
    assert stripped("# only a comment\n", "python") == ""
    assert stripped("// only\n/* comments */\n", "go") == ""


def test_a_language_without_a_form_is_refused():
    with pytest.raises(ValueError, match="no stripped form for language 'rust'"):
        stripped("fn main() {}", "rust")
