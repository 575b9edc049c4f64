"""Small source files in Python, Go and Java for the line benchmark's tests: a copyright header,
nested blocks, closers, comment continuations (tests/benchmarks/test_line_positions.py and
test_line_completion.py)."""

PY = '''# Copyright header: a license the files of a project share.
# It is not code anyone completes.

import os


class Store:
    """Keeps values."""

    def __init__(self, root):
        self.root = root
        self.items = {
            "a": 1,
        }

    def path(self, name):
        if not name:
            raise ValueError("no name")
        return os.path.join(self.root, name)


def main(argv):
    store = Store(argv[0])
    for name in argv[1:]:
        print(store.path(name))
    return 0
'''

GO = '''// Copyright 2024 The Authors.
// Use of this source code is governed by a license.

package store

func Path(root string, names []string) []string {
\tout := make([]string, 0, len(names))
\tfor _, name := range names {
\t\tif name == "" {
\t\t\tcontinue
\t\t}
\t\tout = append(out, root+"/"+name)
\t}
\treturn out
}
'''

JAVA = '''/*
 * Copyright (c) 2024, the authors.
 */
package store;

public class Store {
    /**
     * The path of a name.
     */
    public String path(String root, String name) {
        if (name.isEmpty()) {
            throw new IllegalArgumentException("no name");
        } else {
            return root + "/" + name;
        }
    }
}
'''

DOCS = {"python": [{"path": "store.py", "text": PY}, {"path": "other.py", "text": PY.replace("Store", "Shelf")}],
        "go": [{"path": "store.go", "text": GO}], "java": [{"path": "Store.java", "text": JAVA}]}


# -- positions ---------------------------------------------------------------------------------
