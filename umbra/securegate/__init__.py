"""SecureGate on the client (seed 003, DESIGN §4): access keys, their embeddings, the gate that
routes a request to the secure or a revealing adapter, and the revealing adapters sealed at rest
under keys derived from the access keys. The learned gate routes; the lock is the encryption."""
