import unittest

from calc import mean


class HiddenTest(unittest.TestCase):
    def test_mean_of_one(self):
        self.assertEqual(mean([4.0]), 4.0)

    def test_mean_empty_raises(self):
        with self.assertRaises(ValueError):
            mean([])
