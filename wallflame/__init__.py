"""wallflame: where did each thread's wall-clock time go?"""

__version__ = "0.1.0"
