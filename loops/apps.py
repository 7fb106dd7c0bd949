from django.apps import AppConfig


class LoopsConfig(AppConfig):
    name = "loops"
    verbose_name = "Loops"
