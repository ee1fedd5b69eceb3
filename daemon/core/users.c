/*
 * users — see users.h. The records are few (one per user connected, at
 * most [limits] max_clients) and looked up at accept only; sessions keep
 * a pointer to theirs.
 */
#include "users.h"

#include <stdlib.h>

#include "timeutil.h"

void users_init(gmd_users *users, int64_t quantum_ns)
{
        list_init(&users->list);
        users->n = 0;
        users->turn = 1;
        users->quantum_ns = quantum_ns > 0 ? quantum_ns : 0;
        users->deferred = 0;
        users->clock_ns = now_ns;
}

uint64_t users_now(const gmd_users *users)
{
        return users->clock_ns();
}

void users_set_quantum(gmd_users *users, int64_t quantum_ns)
{
        users->quantum_ns = quantum_ns > 0 ? quantum_ns : 0;
}

gmd_user *users_find(gmd_users *users, uid_t uid)
{
        gmd_list *pos;

        list_for_each(pos, &users->list) {
                gmd_user *u = container_of(pos, gmd_user, link);

                if (u->uid == uid)
                        return u;
        }
        return NULL;
}

gmd_user *users_hold(gmd_users *users, uid_t uid)
{
        gmd_user *u = users_find(users, uid);

        if (!u) {
                u = calloc(1, sizeof(*u));
                if (!u)
                        return NULL;
                u->uid = uid;
                u->credit_ns = users->quantum_ns;
                u->turn = users->turn;
                list_add_tail(&users->list, &u->link);
                users->n++;
        }
        u->refs++;
        return u;
}

void users_release(gmd_users *users, gmd_user *user)
{
        if (!user || --user->refs > 0)
                return;
        list_remove(&user->link);
        users->n--;
        free(user);
}

void users_next_turn(gmd_users *users)
{
        users->turn++;
}

/* One quantum for each turn since the last top-up, up to one quantum. */
static void users_top_up(const gmd_users *users, gmd_user *u)
{
        uint64_t turns = users->turn - u->turn;

        u->turn = users->turn;
        if (u->credit_ns >= users->quantum_ns)
                return;
        /* Many turns idle: whatever it owed is paid (no overflow). */
        if (turns > (uint64_t)(INT64_MAX / 4 / users->quantum_ns))
                u->credit_ns = users->quantum_ns;
        else
                u->credit_ns += (int64_t)turns * users->quantum_ns;
        if (u->credit_ns > users->quantum_ns)
                u->credit_ns = users->quantum_ns;
}

bool users_may_run(gmd_users *users, gmd_user *user)
{
        if (!user || !users->quantum_ns)
                return true;
        if (user->turn != users->turn)
                users_top_up(users, user);
        if (user->credit_ns > 0)
                return true;
        user->deferred++;
        users->deferred++;
        return false;
}

void users_charge(gmd_user *user, uint64_t ns)
{
        int64_t floor_ns = -USERS_MAX_OWED_NS;

        if (!user)
                return;
        if (ns > (uint64_t)(user->credit_ns - floor_ns))
                user->credit_ns = floor_ns;
        else
                user->credit_ns -= (int64_t)ns;
}
