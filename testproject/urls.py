from django.contrib import admin
from django.urls import path

from django_jobs import metrics
from testproject.example import views

urlpatterns = [
    path("admin/", admin.site.urls),
    # Prometheus scrapes the jobs' gauges here (DJANGO_JOBS["METRICS_TOKEN"], or staff).
    path("metrics/", metrics.view, name="metrics"),
    path("signup/", views.signup, name="signup"),
    path("record/", views.record, name="record"),
]
