"""The attack benchmark's harness: simulated defended clients, the traffic they send through a
recorded Middle, and the grid of defence configuration × ε → attack scores.

    clients.py   simulated defended clients (INDVocab, LTokenizer in memory), or a real bundle
    traffic.py   inference prefills and the split fine-tuning loop through a RecordingMiddle
    grid.py      the cells of docs/privacy/attacks.md, their JSON cache and table rows
    shadow.py    the adaptive attacker's shadow client (its own secrets, the same defence and tuning)
    shadow_audit.py  the shadow client and the oracle for `umbra audit`

It sits above both umbra/attacks (what the cloud runs) and umbra/tuning (STuning rows tune the
simulated client), which is why it is not part of either. The benchmark script is
experiments/privacy_attacks.py."""
