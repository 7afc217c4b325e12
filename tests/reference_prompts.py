"""The prompts every agreement test uses: 8 chat questions and 4 raw texts."""

CHAT = [
    "What is the capital of France? Answer in one sentence.",
    "Write a haiku about autumn leaves.",
    "Explain recursion to a ten-year-old.",
    "What are the three primary colors?",
    "Give two tips for writing clean Python code.",
    "How many legs does a spider have?",
    "Name a famous painting by Leonardo da Vinci.",
    "What is the boiling point of water at sea level in Celsius?",
]
RAW = [
    "Once upon a time, in a small village by the sea,",
    "def fibonacci(n):\n    ",
    "The three laws of thermodynamics are",
    "1, 1, 2, 3, 5, 8, 13,",
]
