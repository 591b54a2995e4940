"""What the measurements mean: `cost_model` (what hardware the user lacks would do) and `tables`
(the tables and text people read); no TensorFlow and no matplotlib."""
