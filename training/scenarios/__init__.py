"""The generator's conversations: its vocabularies (`vocab`) and categories (`categories`)."""
