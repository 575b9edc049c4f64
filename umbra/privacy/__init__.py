"""NOIR's client-side privacy layer: INDVocab (randomized embedding table), LTokenizer (secret
vocabulary permutation), its sealing under a key in the OS keyring, and the client bundle that
holds them. See docs/privacy/indvocab.md and docs/privacy/ltokenizer.md."""
