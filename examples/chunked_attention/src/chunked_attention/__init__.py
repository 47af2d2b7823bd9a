"""Example user package for perfsuite (README: "Your own attention")."""
