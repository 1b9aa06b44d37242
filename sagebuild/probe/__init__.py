"""probe"""
