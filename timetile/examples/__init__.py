"""Example definitions shipped with timetile; ``timetile demo`` runs ``checkout_model``."""
