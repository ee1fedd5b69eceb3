/*
 * list — an intrusive doubly linked list, the kernel's shape: the node is
 * embedded in the object and container_of() finds the object again. Used
 * for sessions, buffers and waiting requests, whose counts are small and
 * whose removal must be O(1) when a client goes away.
 */
#ifndef GMD_LIST_H
#define GMD_LIST_H

#include <stddef.h>

#define container_of(ptr, type, member) \
        ((type *)((char *)(ptr) - offsetof(type, member)))

typedef struct gmd_list {
        struct gmd_list *prev, *next;
} gmd_list;

static inline void list_init(gmd_list *head)
{
        head->prev = head->next = head;
}

static inline int list_empty(const gmd_list *head)
{
        return head->next == head;
}

static inline void list_add_tail(gmd_list *head, gmd_list *node)
{
        node->prev = head->prev;
        node->next = head;
        head->prev->next = node;
        head->prev = node;
}

static inline void list_remove(gmd_list *node)
{
        node->prev->next = node->next;
        node->next->prev = node->prev;
        node->prev = node->next = node;
}

#define list_for_each_safe(pos, tmp, head) \
        for ((pos) = (head)->next, (tmp) = (pos)->next; (pos) != (head); \
             (pos) = (tmp), (tmp) = (pos)->next)

#define list_for_each(pos, head) \
        for ((pos) = (head)->next; (pos) != (head); (pos) = (pos)->next)

#endif
