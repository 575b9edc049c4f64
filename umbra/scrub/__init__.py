"""The scrubbed view of code (SecureGate's masked view): secrets, e-mail addresses, IP addresses,
internal hosts and URLs, and personal names replaced by typed placeholders, with a report."""
