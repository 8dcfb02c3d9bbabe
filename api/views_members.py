"""/api/v1/teams/<slug>/members/: who is in a team, and, for its managers, add by username, change a
role, remove. The same services and rules as the members page: identity.members does the change (a team
always keeps a manager, provider-kept teams are read-only, every change recorded with who made it) and
jobs.policy says who may (members read, managers and superusers change, outsiders get 404)."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.exceptions import NotFound, PermissionDenied
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from api import access
from api.errors import Invalid, error_body
from api.serializers import ErrorSerializer
from api.views import ApiViewMixin, _has_bad_text
from identity.members import MembersInvalid, member_invite, member_remove, member_role_set, members_history
from identity.models import Membership, MembershipChange, Role
from jobs import policy
from jobs.models import Team

E = OpenApiResponse(ErrorSerializer)
NOT_A_MANAGER = "Only the team's managers change its members."
NO_SUCH_MEMBER = "No such member of this team."
NOT_AN_OBJECT = "Send a JSON object."
# How a refused change answers (status, code): bad input is the API's usual 400; a member gone meanwhile
# is a 404; the rest conflict with the team's state (409), each with its own code.
REFUSALS = {
    "invalid": (400, "invalid"),
    "gone": (404, "not_found"),
    "already_member": (409, "already_member"),
    "last_manager": (409, "last_manager"),
    "kept_by_provider": (409, "kept_by_provider"),
}


class MemberSerializer(serializers.Serializer):
    username = serializers.CharField()
    role = serializers.ChoiceField(choices=Role.choices)
    joined_at = serializers.DateTimeField(help_text="When they joined the team.")

    def to_representation(self, membership: Membership) -> dict:
        return {
            "username": membership.user.get_username(),
            "role": membership.role,
            "joined_at": serializers.DateTimeField().to_representation(membership.created_at),
        }


class MemberAddSerializer(serializers.Serializer):
    username = serializers.CharField(help_text="An existing portal user (they have signed in once).")
    role = serializers.ChoiceField(choices=Role.choices, required=False, default=Role.MEMBER)


class MemberRoleSerializer(serializers.Serializer):
    role = serializers.ChoiceField(choices=Role.choices)


class MemberChangeSerializer(serializers.Serializer):
    at = serializers.DateTimeField()
    username = serializers.CharField(help_text="The person, by their username at the time.")
    old_role = serializers.CharField(help_text="Empty: they were not a member.")
    new_role = serializers.CharField(help_text="Empty: they are no longer a member.")
    changed_by = serializers.CharField(help_text="Who made it in the portal; empty for an identity provider sync.")
    source = serializers.ChoiceField(choices=MembershipChange.Source.choices)

    def to_representation(self, change: MembershipChange) -> dict:
        return {
            "at": serializers.DateTimeField().to_representation(change.at),
            "username": change.username,
            "old_role": change.old_role,
            "new_role": change.new_role,
            "changed_by": change.changed_by_name,
            "source": change.source,
        }


def _body(request: Request, allowed: set[str]) -> dict:
    """The request's JSON object, refusing anything else by field (never a 500)."""
    body = request.data
    if not isinstance(body, dict):
        raise Invalid({"non_field_errors": [NOT_AN_OBJECT]}, NOT_AN_OBJECT)
    unknown = set(body) - allowed
    if unknown:
        raise Invalid({str(name): ["Unknown field."] for name in sorted(unknown, key=str)})
    for name in allowed & set(body):
        if not isinstance(body[name], str):
            raise Invalid({name: ["Give it as text."]})
        if _has_bad_text(body[name]):
            raise Invalid({name: ["Contains characters that are not allowed."]})
    return body


def _role(body: dict, *, required: bool) -> str:
    role = body.get("role")
    if role is None and not required:
        return Role.MEMBER
    if role not in Role.values:
        raise Invalid({"role": [f"One of: {', '.join(Role.values)}."]})
    return role


def _refused(exc: MembersInvalid) -> Response:
    """The service's refusal in the API's error format, naming the field it is about."""
    answer, code = REFUSALS.get(exc.code, REFUSALS["invalid"])
    fields = {exc.field: [exc.message]} if exc.field else {}
    return Response(error_body(answer, code, exc.message, fields), status=answer)


def _managed_team(request: Request, slug: str) -> Team:
    """The team, if the caller may change its members: 404 for outsiders, 403 for its plain members."""
    team = access.team_by_slug(request.user, slug)
    if not policy.may_manage_members(request.user, team):
        raise PermissionDenied(NOT_A_MANAGER)
    return team


def _membership(team: Team, username: str) -> Membership:
    membership = Membership.objects.select_related("team", "user").filter(team=team, user__username=username).first()
    if membership is None:
        raise NotFound(NO_SUCH_MEMBER)
    return membership


class TeamMembersView(ApiViewMixin, APIView):
    @extend_schema(
        summary="The team's members",
        description="Every member of the team sees the list; people outside the team get 404.",
        responses=MemberSerializer(many=True),
    )
    def get(self, request: Request, slug: str) -> Response:
        team = access.team_by_slug(request.user, slug)
        members = Membership.objects.filter(team=team).select_related("user").order_by("user__username")
        return Response(MemberSerializer(members, many=True).data)

    @extend_schema(
        summary="Add someone to the team (managers)",
        description="By username; they must have signed in to the portal once. The change is recorded with "
        "who made it. 409 `kept_by_provider` where the identity provider keeps the team's members.",
        request=MemberAddSerializer,
        responses={201: MemberSerializer, 400: E, 403: E, 409: E},
    )
    def post(self, request: Request, slug: str) -> Response:
        team = _managed_team(request, slug)
        body = _body(request, {"username", "role"})
        if not body.get("username", "").strip():
            raise Invalid({"username": ["Give the username of the person to add."]})
        role = _role(body, required=False)
        try:
            added = member_invite(team=team, username=body["username"], role=role, by=request.user)
        except MembersInvalid as exc:
            return _refused(exc)
        return Response(MemberSerializer(added).data, status=status.HTTP_201_CREATED)


class TeamMemberView(ApiViewMixin, APIView):
    @extend_schema(summary="A member of the team", responses={200: MemberSerializer})
    def get(self, request: Request, slug: str, username: str) -> Response:
        team = access.team_by_slug(request.user, slug)
        return Response(MemberSerializer(_membership(team, username)).data)

    @extend_schema(
        summary="Change a member's role (managers)",
        description="409 `last_manager` when it would leave the team without a manager.",
        request=MemberRoleSerializer,
        responses={200: MemberSerializer, 400: E, 403: E, 409: E},
    )
    def patch(self, request: Request, slug: str, username: str) -> Response:
        team = _managed_team(request, slug)
        membership = _membership(team, username)
        role = _role(_body(request, {"role"}), required=True)
        try:
            changed = member_role_set(membership=membership, role=role, by=request.user)
        except MembersInvalid as exc:
            return _refused(exc)
        return Response(MemberSerializer(changed).data)

    @extend_schema(
        summary="Remove someone from the team (managers)",
        description="Their workloads stay the team's. 409 `last_manager` for the team's last manager.",
        request=None,
        responses={204: None, 403: E, 409: E},
    )
    def delete(self, request: Request, slug: str, username: str) -> Response:
        team = _managed_team(request, slug)
        membership = _membership(team, username)
        try:
            member_remove(membership=membership, by=request.user)
        except MembersInvalid as exc:
            return _refused(exc)
        return Response(status=status.HTTP_204_NO_CONTENT)


class TeamMemberChangesView(ApiViewMixin, APIView):
    @extend_schema(
        summary="Recent changes to the team's members, newest first",
        responses=MemberChangeSerializer(many=True),
    )
    def get(self, request: Request, slug: str) -> Response:
        team = access.team_by_slug(request.user, slug)
        return Response(MemberChangeSerializer(members_history(team), many=True).data)
