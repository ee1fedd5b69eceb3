/*
 * kepttally — see kepttally.h. A uid's entry goes with its last witness,
 * so the array holds only uids with witnesses now.
 */
#include "kepttally.h"

#include <errno.h>
#include <stdlib.h>
#include <sys/resource.h>

#include "config.h"

unsigned kepttally_bound(const gmd_config *config)
{
        struct rlimit rl;
        rlim_t half;

        if (config->max_buffers_per_user)
                return config->max_buffers_per_user;
        if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur == RLIM_INFINITY)
                return 1u << 24;
        half = rl.rlim_cur / 2;
        return half > (1u << 24) ? 1u << 24 : (unsigned)half;
}

static kepttally_user *user_find(const gmd_kepttally *t, uid_t uid)
{
        for (unsigned i = 0; i < t->n_users; i++)
                if (t->users[i].uid == uid)
                        return &t->users[i];
        return NULL;
}

int kepttally_add(gmd_kepttally *t, uid_t uid)
{
        kepttally_user *u = user_find(t, uid);

        if (u) {
                u->count++;
                return 0;
        }
        if (t->n_users == t->cap_users) {
                unsigned cap = t->cap_users ? 2 * t->cap_users : 8;

                u = realloc(t->users, cap * sizeof(*u));
                if (!u)
                        return -ENOMEM;
                t->users = u;
                t->cap_users = cap;
        }
        t->users[t->n_users++] = (kepttally_user){ .uid = uid, .count = 1 };
        return 0;
}

void kepttally_found(gmd_kepttally *t, uid_t uid)
{
        kepttally_user *u = user_find(t, uid);

        if (u)
                u->found++;
}

void kepttally_charge(gmd_kepttally *t, uid_t uid, gmd_tier tier,
                      unsigned device, uint64_t size, bool on)
{
        kepttally_user *u = user_find(t, uid);

        if (on)
                t->n_charged++;
        else
                t->n_charged--;
        if (tier == GMD_TIER_HOST) {
                t->host = on ? t->host + size : t->host - size;
                return;
        }
        if (u)
                u->vram = on ? u->vram + size : u->vram - size;
        if (device < GMD_MAX_DEVICES)
                t->vram_on[device] = on ? t->vram_on[device] + size :
                                          t->vram_on[device] - size;
}

void kepttally_drop(gmd_kepttally *t, uid_t uid, bool found)
{
        kepttally_user *u = user_find(t, uid);

        if (!u)
                return;
        u->count--;
        if (found)
                u->found--;
        if (u->count == 0)
                *u = t->users[--t->n_users];
}

unsigned kepttally_count(const gmd_kepttally *t, uid_t uid)
{
        const kepttally_user *u = user_find(t, uid);

        return u ? u->count : 0;
}

unsigned kepttally_found_count(const gmd_kepttally *t, uid_t uid)
{
        const kepttally_user *u = user_find(t, uid);

        return u ? u->found : 0;
}

uint64_t kepttally_vram(const gmd_kepttally *t, uid_t uid)
{
        const kepttally_user *u = user_find(t, uid);

        return u ? u->vram : 0;
}

uint64_t kepttally_charged(const gmd_kepttally *t, gmd_tier tier,
                           unsigned device)
{
        if (tier == GMD_TIER_HOST)
                return t->host;
        return device < GMD_MAX_DEVICES ? t->vram_on[device] : 0;
}

void kepttally_free(gmd_kepttally *t)
{
        free(t->users);
        *t = (gmd_kepttally){ 0 };
}
