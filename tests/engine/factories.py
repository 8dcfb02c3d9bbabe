"""factory-boy factories for the domain, shared by the engine, UI and API tests."""

from __future__ import annotations

import factory
from django.contrib.auth import get_user_model

from identity.models import Membership, Role
from jobs.models import GpuType, Quota, Team


class UserFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = get_user_model()
        django_get_or_create = ("username",)
        skip_postgeneration_save = True

    username = factory.Sequence(lambda n: f"user{n}")
    email = factory.LazyAttribute(lambda u: f"{u.username}@example.org")
    password = factory.django.Password("correct horse battery staple")


class TeamFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Team
        django_get_or_create = ("slug",)

    slug = factory.Sequence(lambda n: f"team{n}")
    name = factory.LazyAttribute(lambda t: f"Team {t.slug}")


class MembershipFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Membership

    user = factory.SubFactory(UserFactory)
    team = factory.SubFactory(TeamFactory)
    role = Role.MEMBER


class GpuTypeFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = GpuType
        django_get_or_create = ("slug",)

    slug = factory.Sequence(lambda n: f"gpu{n}")
    display_name = factory.LazyAttribute(lambda g: g.slug.upper())
    node_label_key = "gputype"
    node_label_value = factory.LazyAttribute(lambda g: g.slug)
    cpu_per_gpu_millicores = 1000
    memory_per_gpu_mib = 1024


class QuotaFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Quota

    team = factory.SubFactory(TeamFactory)
    gpu_type = factory.SubFactory(GpuTypeFactory)
    max_gpus = 4
