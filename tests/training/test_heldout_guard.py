"""The trainer refuses a corpus that overlaps the line benchmark's held-out code
(TrainConfig.heldout_dir; umbra/data/contamination.py does the check)."""

from __future__ import annotations

import pytest

from tests.training.conftest import tiny_train_config
from umbra.data.corpus import Document, read_documents, write_documents
from umbra.errors import ConfigError
from umbra.training.trainer import Trainer


def _heldout(root, python_text):
    for lang, text in (("python", python_text), ("java", "class A { void f() {} void g() {} }\n"),
                       ("go", "package q\n\nfunc G() int {\n\treturn 7\n}\n")):
        write_documents(root.parent, root.name, lang, [Document(lang, f"third/{lang}/a", text)])
    return root


def test_a_corpus_that_holds_a_held_out_file_is_refused(tiny_corpus, tmp_path):
    corpus, tok = tiny_corpus
    leaked = next(read_documents(corpus, "train", "python")).text
    heldout = _heldout(tmp_path / "heldout", leaked)
    with pytest.raises(ConfigError, match="held-out|heldout|overlap"):
        Trainer(tiny_train_config(corpus, tok, tmp_path / "run", heldout_dir=heldout))


def test_a_disjoint_held_out_set_lets_training_start(tiny_corpus, tmp_path):
    corpus, tok = tiny_corpus
    heldout = _heldout(tmp_path / "heldout", "def third_party(z):\n    return z * 41\n\n\ndef other():\n    pass\n")
    trainer = Trainer(tiny_train_config(corpus, tok, tmp_path / "run", heldout_dir=heldout), enforce_limits=False)
    assert trainer.stream is not None
