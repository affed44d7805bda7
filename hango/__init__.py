"""hango: long-term memory and skills for an LLM agent runtime, as files in PostgreSQL."""
