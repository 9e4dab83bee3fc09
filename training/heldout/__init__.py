"""The held-out eval requests (requests.jsonl) and the words they are made from."""
