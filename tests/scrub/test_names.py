"""umbra/scrub/names.py: personal names in author tags, copyright lines, trailers and TODO(name)."""

import pytest

from tests.scrub.helpers import found


def names(text: str, path: str = "a.py") -> list[str]:
    return [value for kind, value in found(text, path) if kind == "name"]


@pytest.mark.parametrize("text, expected", [
    (" * @author Santiago Pericas-Geertsen", ["Santiago Pericas-Geertsen"]),
    (" * @author  Eric Ye, IBM", ["Eric Ye"]),
    (" * @author jdoe", ["jdoe"]),
    ('__author__ = "Guido van Rossum <guido@python.org>"', ["Guido van Rossum"]),
    ('__author__ = ("Mike Verdone <mike@x.io>, "\n              "Mark Russell <mark@x.io>")',
     ["Mike Verdone", "Mark Russell"]),
    ('__credits__ = ["Ann Lee", "Bo Chan"]', ["Ann Lee", "Bo Chan"]),
    ("# Author: Collin Winter", ["Collin Winter"]),
    ("Maintainer: Paul Swartz", ["Paul Swartz"]),
    ("Written by:   Fred L. Drake, Jr.", ["Fred L. Drake"]),
    (".. moduleauthor:: Zoë Müller <zm@x.de>", ["Zoë Müller"]),
    ("Signed-off-by: Conan O'Brien <conan@x.io>", ["Conan O'Brien"]),
    ("// Co-authored-by: Søren Kierkegaard <s@x.dk>", ["Søren Kierkegaard"]),
    ("# TODO(jdoe): retry", ["jdoe"]),
    ("// FIXME(rsc) later", ["rsc"]),
    ("# Copyright (c) 2015-2016 Will Bond <will@wbond.net>", ["Will Bond"]),
    ("// Copyright 2004-2006 Ingrid A. Okafor. All rights reserved.", ["Ingrid A. Okafor"]),
    ("Copyright Jason R. Coombs", ["Jason R. Coombs"]),
    (":copyright: (c) 2017 by Kenneth Reitz.", ["Kenneth Reitz"]),
    ("//\tPortions Copyright © 2005-2007 C H Forsyth (forsyth@x.net)", ["C H Forsyth"]),
    ("# SPDX-FileCopyrightText: 2021 Taneli Hukkinen", ["Taneli Hukkinen"]),
    (" * Copyright (c) 2012, Stephen Colebourne & Michael Nascimento Santos",
     ["Stephen Colebourne", "Michael Nascimento Santos"]),
    ("adapted from original tests written by Greg Ewing", ["Greg Ewing"]),
])
def test_anchored_names(text, expected):
    assert names(text) == expected


@pytest.mark.parametrize("text", [
    "// Copyright 2009 The Go Authors. All rights reserved.",
    " * Copyright (c) 1997, 2021, Oracle and/or its affiliates. All rights reserved.",
    "# Copyright (c) 2001-2023 Python Software Foundation",
    "# Copyright 2020 Google LLC",
    "# Copyright (c) Twisted Matrix Laboratories.",
    " * DO NOT ALTER OR REMOVE COPYRIGHT NOTICES OR THIS FILE HEADER.",
    "from twisted.copyright import version",
    " * @author unascribed",
    "\tAuthor: Person{",  # a Go struct field
    "# TODO(#1234): later",
    "// TODO(go.dev/issue/1234): later",
    "# TODO: nothing named",
    "# this was created by the parser",
    "# ask Jane Doe before changing this",  # free prose: not claimed
])
def test_names_not_taken(text):
    assert names(text) == []


def test_an_html_entity_is_part_of_the_name():
    assert names(" * @author Peter von der Ah&eacute;", "A.java") == ["Peter von der Ah&eacute;"]
